//! Data-layer plugins with behaviour of their own (the purely passive ones live in
//! `producer::passive`): `file-discovery` (the endpoint list from a file, read by the app as
//! the `--endpoints-file` machinery), and `models-data-source` / `models-data-extractor`
//! (polling each endpoint's `/v1/models`, run by `endpoints::models`). Their factories only
//! validate parameters; the loader collects them into `DataLayerSettings` and the app starts
//! the work.

pub mod file_discovery;
pub mod models;

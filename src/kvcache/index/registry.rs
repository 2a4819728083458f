//! Endpoint name <-> compact id interning for the index.
//!
//! Ids are `u16` so a holder fits in 32 bits. A removed endpoint's id is
//! "retiring" (its name no longer resolves) until its entries are purged,
//! then reused. The index serialises id changes against batch application
//! with a `RwLock` around this registry (see `index/mod.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use super::holder::{EndpointId, MAX_ENDPOINT_ID};

/// Name/id tables. Not thread-safe on its own.
#[derive(Debug, Default)]
pub struct Registry {
    by_name: HashMap<Arc<str>, EndpointId>,
    names: Vec<Option<Arc<str>>>,
    free: Vec<EndpointId>,
}

impl Registry {
    /// The id of `name`, if registered.
    pub fn id(&self, name: &str) -> Option<EndpointId> {
        self.by_name.get(name).copied()
    }

    /// The name of a live id.
    pub fn name(&self, id: EndpointId) -> Option<&Arc<str>> {
        self.names.get(usize::from(id)).and_then(Option::as_ref)
    }

    /// Registers `name`; `None` when all ids are in use.
    pub fn intern(&mut self, name: &str) -> Option<EndpointId> {
        if let Some(id) = self.id(name) {
            return Some(id);
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None if self.names.len() <= usize::from(MAX_ENDPOINT_ID) => {
                self.names.push(None);
                (self.names.len() - 1) as EndpointId
            }
            None => return None,
        };
        let name: Arc<str> = Arc::from(name);
        self.names[usize::from(id)] = Some(name.clone());
        self.by_name.insert(name, id);
        Some(id)
    }

    /// Unregisters `name`; the id stays reserved until [`Registry::release`].
    pub fn retire(&mut self, name: &str) -> Option<EndpointId> {
        let id = self.by_name.remove(name)?;
        self.names[usize::from(id)] = None;
        Some(id)
    }

    /// Makes a retired id reusable.
    pub fn release(&mut self, id: EndpointId) {
        self.free.push(id);
    }

    /// Live endpoints with their ids.
    pub fn live(&self) -> impl Iterator<Item = (EndpointId, &Arc<str>)> {
        self.names.iter().enumerate().filter_map(|(id, name)| Some((id as EndpointId, name.as_ref()?)))
    }

    /// Live endpoints.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }
}

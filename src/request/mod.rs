//! Request-side wire formats: OpenAI-style request bodies in, typed requests out, plus the
//! response-side usage/model-name handling that shares the same JSON knowledge.
//!
//! Only this module tree reads or writes request/response body JSON; the scheduler sees
//! [`openai::ParsedBody`] and token estimates, never raw bytes.
pub mod estimate;
pub mod openai;
pub mod usage;

//! What the state store and the streaming runtime both speak: [`StreamChunk`]s of rows
//! with their ops, the [`Message`]s between tasks, and the routing of keys to key groups
//! and subtasks ([`routing`]). `state/` and `stream/` depend on this module, never
//! `state/` on `stream/`.

pub mod chunk;
pub mod message;
pub mod routing;

pub use chunk::{Op, StreamChunk};
pub use message::{Barrier, Message, Watermark};

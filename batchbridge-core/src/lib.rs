//! The batchbridge domain.
pub mod backend;
pub mod error;
pub mod shell;
pub mod spec;
pub mod state;

pub use backend::*;
pub use error::{Error, ErrorKind, Result};
pub use spec::*;
pub use state::*;
pub mod local;
pub use local::LocalBackend;
pub mod conformance;

//! The Container Network Interface specification as a library, both sides of it.
//!
//! - [`version`]: spec versions, their comparison and the VERSION result (spec §2, §5).
//! - [`error`]: the error object and its well-known codes (spec §5 "Error").
//! - [`result`]: ADD results of every version 0.1.0–1.1.0 and conversion between them (spec §5).
//! - [`config`]: network configuration lists and single configs (spec §1), [`conf_dir`] loads them
//!   from a directory as libcni does.
//! - [`validate`]: attachment parameters (spec §3 "Attachment Parameters").
//! - [`args`]: `CNI_ARGS` key/value pairs.
//! - [`exec`]: finding and running a plugin binary (spec §2), behind the [`exec::Exec`] seam;
//!   [`inherit`]: a descriptor (a call's lock) that only one thread's plugins inherit.
//! - [`request`]: deriving one plugin's request configuration (spec §3 "Deriving request
//!   configuration", "Deriving runtimeConfig").
//! - [`runtime`]: executing a configuration list for ADD, CHECK, DEL, GC and STATUS (spec §3).
//! - [`cache`]: the result cache, in libcni's on-disk format.
//! - [`skel`]: the plugin side: read env and stdin, dispatch, print the result or error.

pub mod args;
pub mod base64;
pub mod cache;
pub mod child;
pub mod conf_dir;
pub mod config;
pub mod error;
pub mod exec;
pub mod files;
pub mod go_json;
pub mod inherit;
pub mod json_keys;
pub mod quote;
pub mod request;
pub mod result;
pub mod runtime;
pub mod skel;
pub mod validate;
pub mod version;

pub use config::{NetworkConfigList, PluginConfig};
pub use error::{CniError, ErrorCode};
pub use result::CniResult;
pub use version::Version;

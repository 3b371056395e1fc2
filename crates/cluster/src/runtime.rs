//! The one way plumb builds a tokio runtime: current-thread, with I/O and timers. It starts in
//! about 30 µs where a multi-thread runtime takes 3-5 ms, which a CNI plugin started per call
//! cannot spare; the engine is synchronous and blocks on it from plain threads.

use cni::error::{CniError, ErrorCode};

/// A current-thread runtime with I/O and timers enabled.
pub fn current_thread() -> Result<tokio::runtime::Runtime, CniError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CniError::new(ErrorCode::Internal, format!("tokio runtime: {e}")))
}

//! The CNI error object and its well-known codes (spec §5 "Error").
//!
//! Every failure that crosses the CNI boundary — a plugin's error read back by the runtime side,
//! or an error plumb itself prints as a plugin — is a [`CniError`]. The code is chosen where the
//! error is made, from [`ErrorCode`]; the JSON shape is the spec's.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::go_json::null_as_default;
use crate::quote;

/// The longest `msg` a runtime is given ([`CniError::to_json`]).
pub const MAX_MSG: usize = 2 << 10;
/// The longest `details` a runtime is given (a plugin's stderr is cut to 4 KiB before).
pub const MAX_DETAILS: usize = 6 << 10;

/// The well-known error codes of spec §5, plus the two that Go's reference library adds (8 and
/// 999), and any plugin-specific code (100 and above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// 1: incompatible CNI version.
    IncompatibleVersion,
    /// 2: unsupported field in network configuration; the message names the key and value.
    UnsupportedField,
    /// 3: container unknown or does not exist; no cleanup needed.
    UnknownContainer,
    /// 4: invalid necessary environment variables; the message names them.
    InvalidEnvironment,
    /// 5: I/O failure.
    Io,
    /// 6: failed to decode content.
    DecodingFailure,
    /// 7: invalid network configuration.
    InvalidConfig,
    /// 8: invalid network namespace (Go `ErrInvalidNetNS`).
    InvalidNetNs,
    /// 11: try again later.
    TryAgainLater,
    /// 50: the plugin is not available (STATUS).
    NotAvailable,
    /// 51: not available, and existing containers may have limited connectivity (STATUS).
    LimitedConnectivity,
    /// 999: internal error (Go `ErrInternal`), for failures with no better code.
    Internal,
    /// Any other code, as a plugin returned it (100+ are plugin-specific).
    Other(u32),
}

impl ErrorCode {
    pub fn code(self) -> u32 {
        match self {
            ErrorCode::IncompatibleVersion => 1,
            ErrorCode::UnsupportedField => 2,
            ErrorCode::UnknownContainer => 3,
            ErrorCode::InvalidEnvironment => 4,
            ErrorCode::Io => 5,
            ErrorCode::DecodingFailure => 6,
            ErrorCode::InvalidConfig => 7,
            ErrorCode::InvalidNetNs => 8,
            ErrorCode::TryAgainLater => 11,
            ErrorCode::NotAvailable => 50,
            ErrorCode::LimitedConnectivity => 51,
            ErrorCode::Internal => 999,
            ErrorCode::Other(c) => c,
        }
    }

    pub fn from_code(code: u32) -> Self {
        match code {
            1 => ErrorCode::IncompatibleVersion,
            2 => ErrorCode::UnsupportedField,
            3 => ErrorCode::UnknownContainer,
            4 => ErrorCode::InvalidEnvironment,
            5 => ErrorCode::Io,
            6 => ErrorCode::DecodingFailure,
            7 => ErrorCode::InvalidConfig,
            8 => ErrorCode::InvalidNetNs,
            11 => ErrorCode::TryAgainLater,
            50 => ErrorCode::NotAvailable,
            51 => ErrorCode::LimitedConnectivity,
            999 => ErrorCode::Internal,
            c => ErrorCode::Other(c),
        }
    }
}

/// The spec's error object. `Display` gives "msg: details" for logs and operators.
/// A plugin's error JSON may carry `null` for any field (plugins not written in Go print it);
/// Go's decoder reads it as the zero value, and so does this one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    #[serde(
        rename = "cniVersion",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub cni_version: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub code: u32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub msg: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub details: String,
    /// Whether this is the error of a plugin whose process could not be started at all (its
    /// exec failed: a binary for another architecture, a script whose interpreter is missing, a
    /// plugin directory mounted `noexec`). Such a plugin ran none of its code, so it left
    /// nothing to undo, which a caller rolling back a failed ADD needs to know: a DEL of it
    /// would fail the same way. Not part of the spec's error object (never printed, never read
    /// from a plugin), so the code and message the runtime sees are the same either way.
    #[serde(skip)]
    not_started: bool,
}

impl CniError {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        CniError {
            cni_version: String::new(),
            code: code.code(),
            msg: msg.into(),
            details: String::new(),
            not_started: false,
        }
    }

    /// Marks this as the error of a plugin that could not be started ([`CniError::not_started`]).
    pub fn plugin_not_started(mut self) -> Self {
        self.not_started = true;
        self
    }

    /// Whether the plugin this error is about could not be started, and so ran nothing.
    pub fn not_started(&self) -> bool {
        self.not_started
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Adds `more` after the details already there (a delegate's own, say), keeping them.
    pub fn add_details(mut self, more: impl fmt::Display) -> Self {
        self.details = if self.details.is_empty() {
            more.to_string()
        } else {
            format!("{}; {more}", self.details)
        };
        self
    }

    pub fn with_version(mut self, version: impl fmt::Display) -> Self {
        self.cni_version = version.to_string();
        self
    }

    pub fn kind(&self) -> ErrorCode {
        ErrorCode::from_code(self.code)
    }

    /// Prefixes the message with where the error happened, keeping the code.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }

    /// The JSON a plugin prints on stdout (spec §5 "Error": `msg` is a short message), its
    /// `msg` cut to [`MAX_MSG`] and its `details` to [`MAX_DETAILS`]: the runtime puts them in
    /// its events and logs, again at every retry of the sandbox.
    pub fn to_json(&self) -> String {
        let bounded = CniError {
            msg: quote::cut(&self.msg, MAX_MSG).into_owned(),
            details: quote::cut(&self.details, MAX_DETAILS).into_owned(),
            ..self.clone()
        };
        serde_json::to_string(&bounded)
            .unwrap_or_else(|_| format!(r#"{{"code":{},"msg":"unprintable error"}}"#, self.code))
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)?;
        if !self.details.is_empty() {
            write!(f, ": {}", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}

/// Several errors from an operation that keeps going past failures (DEL, GC). Reported together.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ErrorList(pub Vec<CniError>);

impl ErrorList {
    pub fn push(&mut self, e: CniError) {
        self.0.push(e);
    }

    /// `Ok(())` when nothing failed; else one error carrying the first error's code and every
    /// message, so the caller sees all of them.
    pub fn into_result(self) -> Result<(), CniError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.into_iter().next().expect("one error")),
            n => {
                let code = self.0[0].kind();
                let msg = self
                    .0
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                Err(CniError::new(code, format!("{n} errors: {msg}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_fields_of_a_plugins_error_read_as_go_reads_them() {
        let e: CniError = serde_json::from_str(
            r#"{"cniVersion": null, "code": 7, "msg": null, "details": null}"#,
        )
        .unwrap();
        assert_eq!((e.code, e.msg.as_str(), e.details.as_str()), (7, "", ""));
        let e: CniError = serde_json::from_str(r#"{"code": null, "msg": "m"}"#).unwrap();
        assert_eq!((e.code, e.msg.as_str()), (0, "m"));
        // Other wrong types are still refused.
        assert!(serde_json::from_str::<CniError>(r#"{"code": "7", "msg": "m"}"#).is_err());
    }

    #[test]
    fn codes_round_trip() {
        for c in [1, 2, 3, 4, 5, 6, 7, 8, 11, 50, 51, 999, 100, 4242] {
            assert_eq!(ErrorCode::from_code(c).code(), c);
        }
    }

    #[test]
    fn json_shape_is_the_specs() {
        let e = CniError::new(ErrorCode::InvalidConfig, "Invalid Configuration")
            .with_details("Network 192.168.0.0/31 too small to allocate from.")
            .with_version("1.1.0");
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cniVersion":"1.1.0","code":7,"msg":"Invalid Configuration",
                "details":"Network 192.168.0.0/31 too small to allocate from."})
        );
        let bare = CniError::new(ErrorCode::Io, "x");
        assert_eq!(bare.to_json(), r#"{"code":5,"msg":"x"}"#);
    }

    #[test]
    fn error_list_reports_every_message() {
        let mut l = ErrorList::default();
        assert!(l.clone().into_result().is_ok());
        l.push(CniError::new(ErrorCode::Io, "first"));
        l.push(CniError::new(ErrorCode::InvalidConfig, "second"));
        let e = l.into_result().unwrap_err();
        assert_eq!(e.code, 5);
        assert!(e.msg.contains("first") && e.msg.contains("second"), "{e}");
    }
}

//! CNI specification versions: parsing, ordering, and the VERSION result (spec §2 "VERSION", §5
//! "VERSION Success").
//!
//! Versions compare numerically part by part, as libcni does: "0.10.0" is newer than "0.4.0". An
//! empty or missing version means 0.1.0 (spec §1: configurations without `cniVersion` predate it).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{CniError, ErrorCode};

/// A CNI specification version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const V0_1_0: Version = Version::new(0, 1, 0);
    pub const V0_2_0: Version = Version::new(0, 2, 0);
    pub const V0_3_0: Version = Version::new(0, 3, 0);
    pub const V0_3_1: Version = Version::new(0, 3, 1);
    pub const V0_4_0: Version = Version::new(0, 4, 0);
    pub const V1_0_0: Version = Version::new(1, 0, 0);
    pub const V1_1_0: Version = Version::new(1, 1, 0);
    /// The newest version this crate implements.
    pub const CURRENT: Version = Version::V1_1_0;

    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parses a version string. "" means 0.1.0; "1" and "1.0" mean 1.0.0 (libcni's rules).
    pub fn parse(s: &str) -> Result<Version, CniError> {
        if s.is_empty() {
            return Ok(Version::V0_1_0);
        }
        let bad = |why: &str| {
            CniError::new(
                ErrorCode::DecodingFailure,
                format!("invalid CNI version {s:?}: {why}"),
            )
        };
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() > 3 {
            return Err(bad("too many parts"));
        }
        let mut nums = [0u32; 3];
        for (slot, part) in nums.iter_mut().zip(&parts) {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("each part must be a number"));
            }
            *slot = part.parse().map_err(|_| bad("number too large"))?;
        }
        Ok(Version::new(nums[0], nums[1], nums[2]))
    }

    /// Whether this crate knows the result and config format of this version.
    pub fn is_supported(self) -> bool {
        SUPPORTED.contains(&self)
    }

    /// Fails with code 1 (incompatible version) when this crate does not implement `self`.
    pub fn require_supported(self) -> Result<Version, CniError> {
        if self.is_supported() {
            Ok(self)
        } else {
            Err(CniError::new(
                ErrorCode::IncompatibleVersion,
                format!("unsupported CNI version {self}"),
            )
            .with_details(format!("supported versions: {}", supported_list())))
        }
    }
}

/// Every version this crate implements, oldest first.
pub const SUPPORTED: [Version; 7] = [
    Version::V0_1_0,
    Version::V0_2_0,
    Version::V0_3_0,
    Version::V0_3_1,
    Version::V0_4_0,
    Version::V1_0_0,
    Version::V1_1_0,
];

fn supported_list() -> String {
    SUPPORTED
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Version {
    type Err = CniError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Version::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Reads `cniVersion` from any JSON object (config or result) without decoding the rest.
/// Missing or empty means 0.1.0.
pub fn version_of(json: &[u8]) -> Result<Version, CniError> {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(rename = "cniVersion", default)]
        cni_version: Option<String>,
    }
    let probe: Probe = serde_json::from_slice(json).map_err(|e| {
        CniError::new(
            ErrorCode::DecodingFailure,
            format!("cannot read cniVersion: {e}"),
        )
    })?;
    Version::parse(probe.cni_version.as_deref().unwrap_or(""))
}

/// The answer to `CNI_COMMAND=VERSION` (spec §5 "VERSION Success").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(rename = "supportedVersions", default)]
    pub supported_versions: Vec<String>,
}

impl VersionInfo {
    /// What a plugin answers: it echoes the requested version and lists its own.
    pub fn answer(requested: &str, supported: &[Version]) -> Self {
        VersionInfo {
            cni_version: requested.to_string(),
            supported_versions: supported.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// Decodes a plugin's VERSION output the way libcni does: a 0.2.0 answer without
    /// `supportedVersions` means "0.1.0 and 0.2.0" (the oldest plugins answered that way).
    pub fn decode(stdout: &[u8]) -> Result<Vec<Version>, CniError> {
        let info: VersionInfo = serde_json::from_slice(stdout).map_err(|e| {
            CniError::new(
                ErrorCode::DecodingFailure,
                format!("decoding version info: {e}"),
            )
        })?;
        if info.cni_version.is_empty() {
            return Err(CniError::new(
                ErrorCode::DecodingFailure,
                "decoding version info: missing field cniVersion",
            ));
        }
        if info.supported_versions.is_empty() {
            if info.cni_version == "0.2.0" {
                return Ok(vec![Version::V0_1_0, Version::V0_2_0]);
            }
            return Err(CniError::new(
                ErrorCode::DecodingFailure,
                "decoding version info: missing field supportedVersions",
            ));
        }
        info.supported_versions
            .iter()
            .map(|v| Version::parse(v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_means_0_1_0_and_short_forms_fill_zeroes() {
        assert_eq!(Version::parse("").unwrap(), Version::V0_1_0);
        assert_eq!(Version::parse("1").unwrap(), Version::V1_0_0);
        assert_eq!(Version::parse("1.1").unwrap(), Version::V1_1_0);
        assert_eq!(version_of(b"{}").unwrap(), Version::V0_1_0);
        assert_eq!(
            version_of(br#"{"cniVersion":"0.3.1"}"#).unwrap(),
            Version::V0_3_1
        );
    }

    #[test]
    fn comparison_is_numeric_not_lexical() {
        assert!(Version::parse("0.10.0").unwrap() > Version::V0_4_0);
        assert!(Version::V1_0_0 > Version::V0_4_0);
        assert!(Version::V0_3_1 > Version::V0_3_0);
    }

    #[test]
    fn garbage_is_a_decode_error() {
        for bad in [
            "a.b.c",
            "1.2.3.4",
            "1..0",
            "-1.0.0",
            "+1",
            "1.0.99999999999",
        ] {
            let e = Version::parse(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::DecodingFailure.code(), "{bad}");
            assert!(e.msg.contains(bad), "{bad}: {}", e.msg);
        }
    }

    #[test]
    fn unknown_versions_are_incompatible() {
        let e = Version::parse("0.5.0")
            .unwrap()
            .require_supported()
            .unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.details.contains("1.1.0"));
        for v in SUPPORTED {
            assert_eq!(Version::parse(&v.to_string()).unwrap(), v);
            v.require_supported().unwrap();
        }
    }

    #[test]
    fn version_info_decoding_handles_legacy_plugins() {
        assert_eq!(
            VersionInfo::decode(br#"{"cniVersion":"0.2.0"}"#).unwrap(),
            vec![Version::V0_1_0, Version::V0_2_0]
        );
        assert!(VersionInfo::decode(br#"{"cniVersion":"0.3.0"}"#).is_err());
        assert!(VersionInfo::decode(br#"{"supportedVersions":["0.3.0"]}"#).is_err());
        let all = VersionInfo::answer("1.1.0", &SUPPORTED);
        let bytes = serde_json::to_vec(&all).unwrap();
        assert_eq!(VersionInfo::decode(&bytes).unwrap(), SUPPORTED.to_vec());
    }
}

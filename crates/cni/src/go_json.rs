//! JSON as Go's `encoding/json` reads it, which libcni and the reference plugins use: what a
//! plugin written in another language may print and a Go runtime still takes must be taken
//! here too (CNI spec §5, results; the network-status and IPAMClaim objects likewise).

use serde::Deserialize;

/// A field that may be `null`, read as its empty value, the way Go's `encoding/json` (libcni,
/// the reference plugins) reads `null`: it leaves the field as it was. Plugins not written in
/// Go, and Go structs without `omitempty`, print `null` for "none" (CNI spec §5 results are
/// otherwise refused for it).
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

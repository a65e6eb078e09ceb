use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

/// A blake3 digest tagged with what it names, so an object digest and a
/// stage key cannot be mixed up.
pub struct Digest<Kind> {
    bytes: [u8; 32],
    kind: PhantomData<fn() -> Kind>,
}

/// Marker: the digest of stored bytes (a file's content or a tree listing).
pub enum Object {}
/// Marker: the digest of a stage's canonical key manifest.
pub enum Action {}

pub type ObjectDigest = Digest<Object>;
pub type ActionKey = Digest<Action>;

impl<K> Digest<K> {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Digest {
            bytes,
            kind: PhantomData,
        }
    }

    pub fn of(data: &[u8]) -> Self {
        Self::from_bytes(*blake3::hash(data).as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.bytes).to_hex().to_string()
    }

    /// The first 12 hex digits, for humans.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl<K> Clone for Digest<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Digest<K> {}
impl<K> PartialEq for Digest<K> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}
impl<K> Eq for Digest<K> {}
impl<K> std::hash::Hash for Digest<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes.hash(state)
    }
}
impl<K> PartialOrd for Digest<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Digest<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bytes.cmp(&other.bytes)
    }
}

impl<K> fmt::Display for Digest<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}
impl<K> fmt::Debug for Digest<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDigest(pub String);

impl fmt::Display for BadDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not a 64-digit hex blake3 digest", self.0)
    }
}

impl<K> FromStr for Digest<K> {
    type Err = BadDigest;
    fn from_str(text: &str) -> Result<Self, BadDigest> {
        blake3::Hash::from_hex(text)
            .map(|hash| Self::from_bytes(*hash.as_bytes()))
            .map_err(|_| BadDigest(text.to_string()))
    }
}

impl<K> serde::Serialize for Digest<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de, K> serde::Deserialize<'de> for Digest<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

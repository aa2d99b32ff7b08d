//! [`Text`]: a string field of a request, kept as a slice of the bytes it was read from.

use bytes::Bytes;

/// UTF-8 text held in [`Bytes`]. A request's version, type URL and nonce read from a frame are
/// slices of that frame (no allocation); every client sends them with every ACK, and as
/// `String`s they were three allocations per request.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Text(Bytes);

impl Text {
    /// The text in `bytes`, if it is UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<Text, std::str::Utf8Error> {
        std::str::from_utf8(&bytes)?;
        Ok(Text(bytes))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only UTF-8 is ever held (`from_utf8` and the `From` conversions check or start from a
        // `str`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// Its bytes (shared with the request it came in).
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text(Bytes::from(s))
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<&String> for Text {
    fn from(s: &String) -> Text {
        Text::from(s.as_str())
    }
}

str_like!(Text);

//! [`Text`]: a string field of a request, kept as a slice of the bytes it was read from.

use std::borrow::Borrow;

use bytes::Bytes;

/// UTF-8 text held in [`Bytes`]. A request's version, type URL and nonce read from a frame are
/// slices of that frame (no allocation); every client sends them with every ACK, and as
/// `String`s they were three allocations per request. Hashed and compared as its bytes are, so
/// that a map keyed by text is looked up by a name's bytes ([`Borrow`]) without checking them
/// as UTF-8 again (what `as_str` does at each call).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Text(Bytes);

impl Borrow<[u8]> for Text {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl Text {
    /// The text in `bytes`, if it is UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<Text, std::str::Utf8Error> {
        // Nearly every request's text is ASCII (type URLs, nonces, versions, names), told a
        // word at a time: UTF-8's full check, some 90 instructions for a type URL, is for the
        // rest (two text fields in every ACK).
        if !bytes.is_ascii() {
            std::str::from_utf8(&bytes)?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_taken_exactly_when_the_full_utf8_check_takes_it() {
        let long = "type.googleapis.com/envoy.config.cluster.v3.Cluster".as_bytes();
        let mut cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"1".to_vec(),
            long.to_vec(),
            "é".as_bytes().to_vec(),
            format!("{}é", "a".repeat(40)).into_bytes(),
            vec![0x7f],
            vec![0x80],
            vec![0xff; 3],
            vec![0xc3],
            [&long[..20], &[0xc3, 0x28], &long[20..]].concat(),
            [long, &[0xe2, 0x82]].concat(),
        ];
        // A byte past ASCII at every place of a long text.
        for at in 0..long.len() {
            let mut bytes = long.to_vec();
            bytes[at] = 0x80;
            cases.push(bytes);
        }
        for bytes in cases {
            let text = Text::from_utf8(Bytes::from(bytes.clone()));
            match std::str::from_utf8(&bytes) {
                Ok(s) => assert_eq!(text.expect("taken").as_str(), s),
                Err(_) => assert!(text.is_err(), "{bytes:?} refused"),
            }
        }
    }
}

//! `xdstp://` resource names (xRFC TP1): parsed once, checked, and kept canonical.
//!
//! `xdstp://[authority]/{resource type}/{id/*}?{context parameters}` names one resource; a name
//! whose last path segment is `*` is a **glob collection**: every resource directly under that
//! path (not below it, cncf/xds#91) whose context parameters equal the glob's. Two names are the
//! same resource when they differ only in the order of their context parameters (TP1,
//! "Normalization") or in how they percent-encode (RFC 3986 section 6.2.2): [`XdstpName::parse`]
//! gives the one canonical spelling, parameters sorted by key, percent-encodings in upper case
//! and unreserved characters decoded.
//!
//! Only names that start with `xdstp:` pay for any of this ([`is_xdstp`] is one comparison of
//! six bytes): every other name stays opaque bytes.
//!
//! A crate of its own, below both the server (`xdsd-core`, which re-exports it as
//! `xdsd_core::xdstp`) and the client (`xdsd-client`, which speaks to any xDS server and does
//! not depend on the server): one canonical form of a name for both.

#![warn(missing_docs)]

use std::fmt;
use std::sync::Arc;

/// What every type URL begins with (a name's type segment is the type URL without it).
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// The scheme and the `//` that begin every `xdstp://` name.
pub const SCHEME: &str = "xdstp://";

/// Whether `name` claims to be an `xdstp:` name (and so is parsed, and may be malformed). Every
/// other name is opaque.
pub fn is_xdstp(name: &str) -> bool {
    name.as_bytes()
        .get(..6)
        .is_some_and(|s| s.eq_ignore_ascii_case(b"xdstp:"))
}

/// What is wrong with an `xdstp:` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum XdstpError {
    /// The scheme is not followed by `//` (or is not spelled `xdstp` in lower case).
    #[error("an xdstp name begins with \"xdstp://\"")]
    Scheme,
    /// No `/` after the authority: no resource type.
    #[error("no resource type after the authority (xdstp://AUTHORITY/TYPE/ID)")]
    NoType,
    /// The resource type segment is empty.
    #[error("the resource type is empty (xdstp://AUTHORITY/TYPE/ID)")]
    EmptyType,
    /// No id after the resource type.
    #[error("no id after the resource type (xdstp://AUTHORITY/TYPE/ID)")]
    NoId,
    /// An empty path segment (`a//b`, or a trailing `/`).
    #[error("an empty path segment in the id {0:?}")]
    EmptySegment(String),
    /// `*` as a path segment other than the last.
    #[error("\"*\" is only a glob as the last path segment, not in {0:?}")]
    InnerGlob(String),
    /// A `#` fragment: processing directives locate a resource, they do not name one.
    #[error("a processing directive (#...) is not part of a resource name")]
    Directive,
    /// A `%` not followed by two hexadecimal digits.
    #[error("\"%\" not followed by two hexadecimal digits in {0:?}")]
    BadPercent(String),
    /// A character RFC 3986 does not allow there, unencoded.
    #[error("{ch:?} must be percent-encoded in the {part}")]
    BadChar {
        /// The character.
        ch: char,
        /// Where: the authority, the resource type, the id, the context parameters.
        part: &'static str,
    },
    /// A context parameter without `=`, or with an empty key.
    #[error("context parameter {0:?} is not KEY=VALUE")]
    BadParam(String),
    /// The same context parameter key twice.
    #[error("context parameter {0:?} appears twice")]
    DuplicateParam(String),
    /// The resource type segment is not the type of the resource it names.
    #[error("the name's resource type {found:?} is not the resource's type {expected:?}")]
    WrongType {
        /// The type the resource is (without `type.googleapis.com/`).
        expected: String,
        /// The type the name says.
        found: String,
    },
    /// A glob where one resource is named.
    #[error("a glob collection (ending in /*) names a collection, not one resource")]
    GlobAsResource,
}

/// One `xdstp://` name (or glob collection), canonical.
///
/// Cheap to clone (one `Arc<str>` and offsets). Equality, hashing and order are those of the
/// canonical text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XdstpName {
    text: Arc<str>,
    /// Where the authority ends (the `/` before the type).
    authority_end: u32,
    /// Where the type ends (the `/` before the id).
    type_end: u32,
    /// Where the id ends: the `?` of the parameters, or the end.
    id_end: u32,
}

impl fmt::Debug for XdstpName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text, f)
    }
}

impl fmt::Display for XdstpName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `b` is an RFC 3986 unreserved character.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Whether `b` may appear unencoded in a path segment (`pchar` without `%`).
fn pchar(b: u8) -> bool {
    unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Appends `part` to `out` with its percent-encoding normalized: `%` and two hex digits in upper
/// case, or the character itself when it is unreserved. Any other byte must satisfy `allowed`.
fn normalize(
    part: &str,
    allowed: impl Fn(u8) -> bool,
    what: &'static str,
    out: &mut String,
) -> Result<(), XdstpError> {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(XdstpError::BadPercent(part.to_owned()));
            };
            let decoded = h << 4 | l;
            if unreserved(decoded) {
                out.push(decoded as char);
            } else {
                out.push('%');
                out.push(
                    char::from_digit(u32::from(h), 16).map_or('0', |c| c.to_ascii_uppercase()),
                );
                out.push(
                    char::from_digit(u32::from(l), 16).map_or('0', |c| c.to_ascii_uppercase()),
                );
            }
            i += 3;
            continue;
        }
        if !allowed(b) {
            let ch = part[i..].chars().next().unwrap_or('\u{fffd}');
            return Err(XdstpError::BadChar { ch, part: what });
        }
        out.push(b as char);
        i += 1;
    }
    Ok(())
}

fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl XdstpName {
    /// Parses and checks `name`, giving its canonical form.
    pub fn parse(name: &str) -> Result<XdstpName, XdstpError> {
        let rest = name.strip_prefix(SCHEME).ok_or(XdstpError::Scheme)?;
        if rest.contains('#') {
            return Err(XdstpError::Directive);
        }
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = path.split_once('/').ok_or(XdstpError::NoType)?;
        let (type_name, id) = path.split_once('/').ok_or(XdstpError::NoId)?;
        if type_name.is_empty() {
            return Err(XdstpError::EmptyType);
        }
        if id.is_empty() {
            return Err(XdstpError::NoId);
        }
        let mut text = String::with_capacity(name.len());
        text.push_str(SCHEME);
        normalize(
            authority,
            |b| pchar(b) || matches!(b, b'[' | b']'),
            "authority",
            &mut text,
        )?;
        let authority_end = text.len();
        text.push('/');
        normalize(type_name, pchar, "resource type", &mut text)?;
        let type_end = text.len();
        let segments: Vec<&str> = id.split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            if segment.is_empty() {
                return Err(XdstpError::EmptySegment(id.to_owned()));
            }
            if *segment == "*" && i + 1 != segments.len() {
                return Err(XdstpError::InnerGlob(id.to_owned()));
            }
            text.push('/');
            normalize(segment, pchar, "id", &mut text)?;
        }
        let id_end = text.len();
        if let Some(query) = query.filter(|q| !q.is_empty()) {
            let mut params: Vec<(String, String)> = Vec::new();
            for param in query.split('&') {
                let Some((key, value)) = param.split_once('=').filter(|(k, _)| !k.is_empty())
                else {
                    return Err(XdstpError::BadParam(param.to_owned()));
                };
                let allowed =
                    |b: u8| (pchar(b) || matches!(b, b'/' | b'?')) && b != b'&' && b != b'=';
                let mut k = String::new();
                normalize(key, allowed, "context parameters", &mut k)?;
                let mut v = String::new();
                normalize(value, allowed, "context parameters", &mut v)?;
                params.push((k, v));
            }
            params.sort();
            for pair in params.windows(2) {
                if pair[0].0 == pair[1].0 {
                    return Err(XdstpError::DuplicateParam(pair[0].0.clone()));
                }
            }
            for (i, (k, v)) in params.iter().enumerate() {
                text.push(if i == 0 { '?' } else { '&' });
                text.push_str(k);
                text.push('=');
                text.push_str(v);
            }
        }
        Ok(XdstpName {
            text: text.into(),
            authority_end: offset(authority_end),
            type_end: offset(type_end),
            id_end: offset(id_end),
        })
    }

    /// Parses `name` as the name of one resource of type `type_url`: a glob is an error, and so
    /// is a type segment other than the resource's.
    pub fn parse_resource(name: &str, type_url: &str) -> Result<XdstpName, XdstpError> {
        let parsed = XdstpName::parse(name)?;
        parsed.check_type(type_url)?;
        if parsed.is_glob() {
            return Err(XdstpError::GlobAsResource);
        }
        Ok(parsed)
    }

    /// Whether the name's type segment is `type_url`'s message type.
    pub fn check_type(&self, type_url: &str) -> Result<(), XdstpError> {
        let expected = type_url.strip_prefix(TYPE_URL_PREFIX).unwrap_or(type_url);
        if self.resource_type() == expected {
            Ok(())
        } else {
            Err(XdstpError::WrongType {
                expected: expected.to_owned(),
                found: self.resource_type().to_owned(),
            })
        }
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The canonical text, shared.
    pub fn as_arc(&self) -> &Arc<str> {
        &self.text
    }

    /// The authority (may be empty), percent-encoded as in the name.
    pub fn authority(&self) -> &str {
        &self.text[SCHEME.len()..self.authority_end as usize]
    }

    /// The resource type segment (`envoy.config.endpoint.v3.LbEndpoint`).
    pub fn resource_type(&self) -> &str {
        &self.text[self.authority_end as usize + 1..self.type_end as usize]
    }

    /// The id: the path after the type (`c1/ep1`, or `c1/*` for a glob).
    pub fn id(&self) -> &str {
        &self.text[self.type_end as usize + 1..self.id_end as usize]
    }

    /// The context parameters, sorted by key, as written (percent-encoded).
    pub fn params(&self) -> impl Iterator<Item = (&str, &str)> {
        self.query()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
    }

    /// The canonical query (`a=1&b=2`), empty when the name has no context parameters.
    pub fn query(&self) -> &str {
        self.text
            .get(self.id_end as usize + 1..)
            .unwrap_or_default()
    }

    /// Whether the name is a glob collection (its last path segment is `*`).
    pub fn is_glob(&self) -> bool {
        self.id() == "*" || self.id().ends_with("/*")
    }

    /// The glob collection a resource of this name is a member of: the same authority, type
    /// and context parameters, with its last path segment replaced by `*`. For a glob, itself.
    pub fn collection(&self) -> String {
        collection_of(&self.text).unwrap_or_default()
    }
}

/// The glob collection of the canonical xdstp name `name` (see [`XdstpName::collection`]), read
/// from its text without parsing it again: `None` when `name` is not an xdstp name with an id.
pub fn collection_of(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len() + 2);
    write_collection(name, &mut out).then_some(out)
}

/// [`collection_of`] into `out` (cleared first): whether `name` has a collection.
fn write_collection(name: &str, out: &mut String) -> bool {
    out.clear();
    collection_parts(name).is_some_and(|(dir, query)| {
        out.push_str(SCHEME);
        out.push_str(dir);
        out.push('*');
        if let Some(q) = query.filter(|q| !q.is_empty()) {
            out.push('?');
            out.push_str(q);
        }
        true
    })
}

/// Calls `f` with the glob collection of the canonical xdstp name `name` ([`collection_of`]),
/// built in a buffer of the thread's, not a new string: a stream's look at a changed member
/// ("is its collection subscribed?") allocates nothing. `None` when `name` has none. (Called
/// again from `f`, it finds the buffer taken and builds a string.)
pub fn with_collection_of<R>(name: &str, f: impl FnOnce(&str) -> R) -> Option<R> {
    thread_local! {
        static BUFFER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUFFER.with(|buffer| match buffer.try_borrow_mut() {
        Ok(mut buffer) => write_collection(name, &mut buffer).then(|| f(&buffer)),
        Err(_) => collection_of(name).map(|c| f(&c)),
    })
}

/// The parts of `name`'s collection: its path up to its id's last segment (after the scheme),
/// and its query.
fn collection_parts(name: &str) -> Option<(&str, Option<&str>)> {
    let rest = name.strip_prefix(SCHEME)?;
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let (_, after_authority) = path.split_once('/')?;
    let (_, id) = after_authority.split_once('/')?;
    if id.is_empty() {
        return None;
    }
    let dir_len = path.len() - id.len() + id.rfind('/').map_or(0, |i| i + 1);
    Some((&path[..dir_len], query))
}

/// A glob collection's name read from its text: the path up to and with the `/` before `*`, and
/// the query (empty without context parameters); `None` when `name` is not an xdstp glob. For
/// names already canonical (as the machines keep them), no parse.
pub fn glob_parts(name: &str) -> Option<(&str, &str)> {
    if !is_xdstp(name) {
        return None;
    }
    let (path, query) = name.split_once('?').unwrap_or((name, ""));
    let prefix = path.strip_suffix('*')?;
    // At least `xdstp://AUTHORITY/TYPE/` before the `*`.
    let after_scheme = prefix.strip_prefix(SCHEME)?;
    (prefix.ends_with('/') && after_scheme.matches('/').count() >= 2).then_some((prefix, query))
}

/// Whether `name` is a glob collection ([`glob_parts`]).
pub fn is_glob(name: &str) -> bool {
    glob_parts(name).is_some()
}

/// Whether the resource `name` (canonical) is a member of the glob whose parts are `prefix`
/// and `query` ([`glob_parts`]): directly under the glob's path (not below it, cncf/xds#91),
/// with the same context parameters.
pub fn is_member(prefix: &str, query: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|rest| is_member_rest(query, rest))
}

/// [`is_member`] for a name known to start with the glob's prefix: `rest` is what follows it.
/// A walk of the names under a glob's path compares the prefix once per name, not twice.
pub fn is_member_rest(query: &str, rest: &str) -> bool {
    let (id, params) = rest.split_once('?').unwrap_or((rest, ""));
    !id.is_empty() && !id.contains('/') && id != "*" && params == query
}

/// The canonical form of `name` when it is a well-formed xdstp name that is not already
/// canonical; `None` for every other name (opaque names, canonical ones, malformed ones).
pub fn canonical(name: &str) -> Option<Arc<str>> {
    if !is_xdstp(name) {
        return None;
    }
    let parsed = XdstpName::parse(name).ok()?;
    (parsed.as_str() != name).then_some(parsed.text)
}

#[cfg(test)]
mod tests;

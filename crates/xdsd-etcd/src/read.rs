//! Reading the whole prefix at one revision, page by page.

use bytes::Bytes;
use etcd_client::GetOptions;

use crate::error::{self, Kind};
use crate::keys::{classify, Key};
use crate::{Etcd, EtcdError, Snapshot};

/// Keys asked for per page; halved while a page's response is over the decoding limit.
const PAGE: i64 = 512;

/// How many times a read restarts because its revision was compacted under it.
const COMPACTED_RETRIES: usize = 5;

/// Reads the prefix as it was at `revision`; [`EtcdError::Compacted`] when etcd no longer has it.
pub(crate) async fn read_at(etcd: &Etcd, revision: i64) -> Result<Snapshot, EtcdError> {
    match read_once(etcd, revision).await? {
        Some(snapshot) => Ok(snapshot),
        None => Err(EtcdError::Compacted {
            prefix: etcd.inner.options.prefix.clone(),
            revision,
        }),
    }
}

pub(crate) async fn read(etcd: &Etcd) -> Result<Snapshot, EtcdError> {
    let mut attempt = 0;
    let mut unavailable = 1;
    loop {
        let once = match read_once(etcd, 0).await {
            Err(EtcdError::Unreachable { what, reason, .. })
                if unavailable < crate::UNAVAILABLE_ATTEMPTS =>
            {
                etcd.unavailable_pause(unavailable, &what, &reason).await;
                unavailable += 1;
                continue;
            }
            once => once?,
        };
        match once {
            Some(snapshot) => return Ok(snapshot),
            None if attempt < COMPACTED_RETRIES => attempt += 1,
            None => {
                return Err(EtcdError::Request {
                    endpoints: etcd.inner.options.where_(),
                    what: format!("reading prefix {}", etcd.inner.options.prefix),
                    reason: "the revision being read was compacted away every time".into(),
                })
            }
        }
    }
}

/// One read at `revision` (0: the latest); `None` when the revision it read at was compacted
/// before the last page.
async fn read_once(etcd: &Etcd, revision: i64) -> Result<Option<Snapshot>, EtcdError> {
    let inner = &etcd.inner;
    let options = &inner.options;
    let what = || format!("reading prefix {}", options.prefix);
    let mut kv = inner.kv.clone();
    let mut snapshot = Snapshot {
        revision,
        ..Snapshot::default()
    };
    let mut start = inner.prefix.clone();
    let mut limit = PAGE;
    loop {
        let mut get = GetOptions::new()
            .with_range(inner.end.clone())
            .with_limit(limit);
        if snapshot.revision > 0 {
            get = get.with_revision(snapshot.revision);
        }
        match etcd.call(what, kv.get(start.clone(), Some(get))).await? {
            Ok(mut response) => {
                if snapshot.revision == 0 {
                    snapshot.revision = revision_of(etcd, response.header())?;
                }
                let more = response.more();
                let kvs = response.take_kvs();
                let Some(last) = kvs.last() else {
                    return Ok(Some(snapshot));
                };
                start = after(last.key());
                for kv in kvs {
                    let (key, value) = kv.into_key_value();
                    add(etcd, &mut snapshot, &key, value);
                }
                if !more {
                    return Ok(Some(snapshot));
                }
                limit = PAGE;
            }
            Err(e) => match error::kind(&e) {
                Kind::TooLargeResponse if limit > 1 => limit /= 2,
                Kind::TooLargeResponse => {
                    // One key whose value is over the limit: name it without its value.
                    let get = GetOptions::new()
                        .with_range(inner.end.clone())
                        .with_limit(1)
                        .with_keys_only();
                    let get = if snapshot.revision > 0 {
                        get.with_revision(snapshot.revision)
                    } else {
                        get
                    };
                    let response = match etcd.call(what, kv.get(start.clone(), Some(get))).await? {
                        Ok(response) => response,
                        Err(e) if matches!(error::kind(&e), Kind::Compacted) => return Ok(None),
                        Err(e) => return Err(error::from_client(&options.where_(), &what(), &e)),
                    };
                    if snapshot.revision == 0 {
                        snapshot.revision = revision_of(etcd, response.header())?;
                    }
                    let Some(kv) = response.kvs().first() else {
                        return Ok(Some(snapshot));
                    };
                    if let Key::Resource(key) | Key::Invalid(key, _) =
                        classify(&inner.prefix, kv.key())
                    {
                        snapshot.rejected.insert(
                            key,
                            format!(
                                "the value is over the limit of {} bytes",
                                options.max_value_bytes
                            ),
                        );
                    }
                    start = after(kv.key());
                    if !response.more() {
                        return Ok(Some(snapshot));
                    }
                    limit = PAGE;
                }
                Kind::Compacted => return Ok(None),
                _ => return Err(error::from_client(&options.where_(), &what(), &e)),
            },
        }
    }
}

/// The first key after `key`.
fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

fn revision_of(
    etcd: &Etcd,
    header: Option<&etcd_client::ResponseHeader>,
) -> Result<i64, EtcdError> {
    match header {
        Some(header) if header.revision() > 0 => Ok(header.revision()),
        _ => Err(EtcdError::Request {
            endpoints: etcd.inner.options.where_(),
            what: format!("reading prefix {}", etcd.inner.options.prefix),
            reason: "the response has no revision".into(),
        }),
    }
}

/// Adds one key and its value to `snapshot`.
fn add(etcd: &Etcd, snapshot: &mut Snapshot, key: &[u8], value: Vec<u8>) {
    let limit = etcd.inner.options.max_value_bytes;
    match classify(&etcd.inner.prefix, key) {
        Key::Reserved => {}
        Key::Invalid(key, why) => {
            snapshot.rejected.insert(key, why.to_string());
        }
        Key::Resource(key) if value.len() > limit => {
            snapshot.rejected.insert(
                key,
                format!(
                    "the value is {} bytes, over the limit of {limit} bytes",
                    value.len()
                ),
            );
        }
        Key::Resource(key) => {
            snapshot.entries.insert(key, Bytes::from(value));
        }
    }
}

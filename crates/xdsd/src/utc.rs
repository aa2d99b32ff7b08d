//! Times as xdsd's commands print them: UTC, from the `time` crate's calendar.

use std::time::{SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;

/// `2026-01-02T03:04:05.678Z` (`watch`'s lines).
pub(crate) fn rfc3339_millis(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let millis = since.subsec_millis();
    match OffsetDateTime::from_unix_timestamp(since.as_secs().try_into().unwrap_or(i64::MAX)) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{}.{millis:03}s after the Unix epoch", since.as_secs()),
    }
}

/// `2026-11-28 06:10:00Z` of milliseconds since the Unix epoch (`history`'s rows; a time past
/// the calendar, which a note written by hand may hold, is printed as seconds).
pub(crate) fn seconds_of_unix_ms(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    match OffsetDateTime::from_unix_timestamp(secs.try_into().unwrap_or(i64::MAX)) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{secs}s after the Unix epoch"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn watch_times_are_rfc3339_in_utc_with_milliseconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_767_323_045_678);
        assert_eq!(rfc3339_millis(t), "2026-01-02T03:04:05.678Z");
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn history_times_are_written_in_utc_and_a_time_past_the_calendar_as_seconds() {
        assert_eq!(seconds_of_unix_ms(0), "1970-01-01 00:00:00Z");
        assert_eq!(
            seconds_of_unix_ms(1_795_846_200_000),
            "2026-11-28 06:10:00Z"
        );
        assert_eq!(seconds_of_unix_ms(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(
            seconds_of_unix_ms(u64::MAX),
            format!("{}s after the Unix epoch", u64::MAX / 1000)
        );
    }
}

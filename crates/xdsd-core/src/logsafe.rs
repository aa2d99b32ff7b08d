//! Client-supplied text (node ids, type URLs, nonces, versions, error details) as logs show it:
//! control characters escaped, so that a newline in a node id cannot forge a log line, and cut
//! after [`MAX_SHOWN`] characters, so that a 1 MB node id does not write megabytes per line.

use std::fmt;

/// Characters of one client-supplied value a log line shows.
pub const MAX_SHOWN: usize = 256;

/// `text`, escaped and truncated for a log line.
pub fn shown(text: &str) -> Shown<'_> {
    Shown(text)
}

/// Text shown in a log line: `Display` escapes control characters and truncates it.
pub struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for (count, c) in self.0.chars().enumerate() {
            if count == MAX_SHOWN {
                let rest = self.0.len() - self.0.char_indices().nth(count).map_or(0, |(i, _)| i);
                return write!(f, "…(+{rest} bytes)");
            }
            if c.is_control() {
                for e in c.escape_default() {
                    f.write_char(e)?;
                }
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newline_cannot_forge_a_log_line() {
        let forged = "node-1\n2026-01-01T00:00:00Z  INFO xdsd: all good";
        let text = shown(forged).to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.starts_with("node-1\\n2026"));
    }

    #[test]
    fn a_long_value_is_cut_and_says_how_much_is_left() {
        let long = "x".repeat(1_000_000);
        let text = shown(&long).to_string();
        assert!(text.len() < MAX_SHOWN + 32, "{}", text.len());
        assert!(text.ends_with(&format!("…(+{} bytes)", 1_000_000 - MAX_SHOWN)));
        assert_eq!(shown("short").to_string(), "short");
    }
}

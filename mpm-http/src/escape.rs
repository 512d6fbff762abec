//! Text escapes for what applications on the layer write into bodies: the
//! status page's HTML, a directory listing's HTML and JSON. Here, below
//! both, so that neither application depends on the other for them.

use std::fmt::Write as _;

/// Append `s` as the inside of a JSON string.
pub fn json_escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // `<` too, so that the JSON is safe to paste into a <script>.
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '<' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// Append `s` as HTML text.
pub fn html_escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_html_escaped() {
        let mut out = String::new();
        html_escape_into(&mut out, "GET /<b>&x\"y' HTTP/1.1");
        assert_eq!(out, "GET /&lt;b&gt;&amp;x&quot;y&#39; HTTP/1.1");
    }

    #[test]
    fn json_escaping_covers_controls() {
        let mut out = String::new();
        json_escape_into(&mut out, "a\u{1}\t\"\\é\u{7f}");
        assert_eq!(out, "a\\u0001\\t\\\"\\\\é\\u007f");
    }
}

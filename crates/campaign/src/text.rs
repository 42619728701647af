//! Outside text made safe for where it is shown: a terminal (control characters escaped, so a
//! server's model id or a snapshot's GPU name cannot move the cursor or retitle the window),
//! Markdown (cells and lines escaped, so `|` and raw HTML stay text), and a POSIX shell (quoted).
//! Every renderer of journal text goes through these; HTML escaping is `report_svg::esc`.

/// `s` with control characters (C0 but newline and tab, DEL, C1) shown escaped (`\x1b`,
/// `\u{9b}`): the probe's one escaper, used for every terminal line.
pub use servetune_probe::render::printable as term;

/// `s` as inline Markdown text: one line, Markdown's punctuation and HTML's `<` and `&` escaped
/// (a lone `>` opens nothing inside a line), control characters escaped as on a terminal. Safe in a table cell and a list item.
pub fn md(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for c in term(s).chars() {
        match c {
            '\n' | '\r' | '\t' => o.push(' '),
            '<' => o.push_str("&lt;"),
            '&' => o.push_str("&amp;"),
            '\\' | '|' | '`' | '*' | '_' | '[' | ']' | '#' => {
                o.push('\\');
                o.push(c);
            }
            c => o.push(c),
        }
    }
    o
}

/// A Markdown code fence longer than any run of backticks in `s`, so `s` cannot close it.
pub fn fence(s: &str) -> String {
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

/// One word quoted for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_are_shown_not_sent() {
        assert_eq!(term("GPU\x1b]0;pwned\x07 name"), "GPU\\x1b]0;pwned\\x07 name");
        assert_eq!(term("a\u{9b}31m"), "a\\u{9b}31m");
        assert_eq!(term("two\nlines\tok"), "two\nlines\tok");
    }

    #[test]
    fn markdown_cells_keep_pipes_and_html_as_text() {
        assert_eq!(md("a|b <script>x</script>"), "a\\|b &lt;script>x&lt;/script>");
        assert_eq!(md("line\nbreak"), "line break");
        assert_eq!(md("[link](javascript:x)"), "\\[link\\](javascript:x)");
    }

    #[test]
    fn a_fence_outlasts_the_backticks_inside() {
        assert_eq!(fence("plain"), "```");
        assert_eq!(fence("x ```` y"), "`````");
    }

    #[test]
    fn shell_words_are_quoted_when_they_need_it() {
        assert_eq!(shell_quote("--tp=8"), "--tp=8");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's; rm -rf /"), "'it'\\''s; rm -rf /'");
        assert_eq!(shell_quote(""), "''");
    }
}

//! The status pages' HTML, shared by kilnd's host page and kiln-cache's fleet page.
//!
//! Both pages show text that clients sent (host names, GPU names, kernel identities, miss
//! details), and a hostile client must not be able to put markup on an operator's screen. So the
//! builder takes text only: every string that reaches [`Page`] goes through [`escape`], and no
//! method accepts raw HTML. The pages work without JavaScript (a meta refresh reloads them); the
//! one inline script only marks the document as scripted, which the browser test uses to prove
//! the page was read with JavaScript off.

use std::fmt::Write;

/// Escapes text for an HTML element's content or a quoted attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters have no business on a page; a client could use them to confuse
            // a terminal that views the source.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `part` of `whole` as a percentage with one decimal, or "–" when there is nothing to divide.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 { "–".to_owned() } else { format!("{:.1}%", part as f64 * 100.0 / whole as f64) }
}

/// How long before `now_ms` the moment `then_ms` was (both Unix milliseconds), for a person.
pub fn ago(now_ms: u64, then_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

/// The current time in Unix milliseconds.
pub fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    since.as_millis() as u64
}

/// One table cell: its text, an optional `id` (so a test can find a figure) and whether it is
/// flagged (drawn as a warning).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cell {
    pub text: String,
    pub id: Option<String>,
    pub flagged: bool,
}

impl Cell {
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub fn flagged(mut self, flagged: bool) -> Self {
        self.flagged = flagged;
        self
    }
}

impl<T: std::fmt::Display> From<T> for Cell {
    fn from(text: T) -> Self {
        Cell { text: text.to_string(), id: None, flagged: false }
    }
}

/// A table row; `key` becomes its `data-key` attribute, so a test can find a host's row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    pub key: Option<String>,
    pub cells: Vec<Cell>,
    pub flagged: bool,
}

impl Row {
    pub fn new(cells: Vec<Cell>) -> Self {
        Row { key: None, cells, flagged: false }
    }

    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn flagged(mut self, flagged: bool) -> Self {
        self.flagged = flagged;
        self
    }
}

/// Small, readable, no external resources (the page must render on an air-gapped fleet).
const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24;background:#fff}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
p.sub{color:#57606a;margin:0 0 1em}table{border-collapse:collapse;margin:.2em 0}\
th,td{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.flag{background:#ffebe9;color:#a40e26}.ok{color:#1a7f37}.down{color:#a40e26;font-weight:600}\
.figures{display:flex;gap:1em;flex-wrap:wrap}.figure{border:1px solid #d0d7de;border-radius:6px;\
padding:.5em 1em;min-width:9em}.figure b{display:block;font-size:1.5em}.muted{color:#57606a}";

/// A page under construction. Sections are appended in order; [`Page::finish`] closes it.
#[derive(Debug)]
pub struct Page {
    body: String,
    head: String,
}

impl Page {
    /// A page titled `title` that reloads itself every `refresh_secs` (a meta refresh: no script
    /// needed), with `subtitle` under the heading.
    pub fn new(title: &str, subtitle: &str, refresh_secs: u32) -> Self {
        let title = escape(title);
        let head = format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"{refresh_secs}\">\
             <meta name=\"viewport\" content=\"width=device-width\">\
             <title>{title}</title><style>{STYLE}</style></head>\n"
        );
        let body = format!(
            "<body><script>document.documentElement.dataset.js=\"on\"</script>\
             <h1>{title}</h1><p class=\"sub\">{}</p>\n",
            escape(subtitle)
        );
        Page { body, head }
    }

    /// A row of headline figures: (label, value, id).
    pub fn figures(&mut self, figures: &[(&str, String, &str)]) {
        self.body.push_str("<div class=\"figures\">");
        for (label, value, id) in figures {
            let _ = write!(
                self.body,
                "<div class=\"figure\"><span class=\"muted\">{}</span><b id=\"{}\">{}</b></div>",
                escape(label),
                escape(id),
                escape(value)
            );
        }
        self.body.push_str("</div>\n");
    }

    pub fn heading(&mut self, text: &str) {
        let _ = writeln!(self.body, "<h2>{}</h2>", escape(text));
    }

    pub fn paragraph(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p class=\"muted\">{}</p>", escape(text));
    }

    /// A table with an `id`, its column headers and rows. Cells whose text parses as a number
    /// are right-aligned.
    pub fn table(&mut self, id: &str, headers: &[&str], rows: &[Row]) {
        let _ = write!(self.body, "<table id=\"{}\"><tr>", escape(id));
        for h in headers {
            let _ = write!(self.body, "<th>{}</th>", escape(h));
        }
        self.body.push_str("</tr>\n");
        for row in rows {
            self.body.push_str("<tr");
            if let Some(key) = &row.key {
                let _ = write!(self.body, " data-key=\"{}\"", escape(key));
            }
            if row.flagged {
                self.body.push_str(" class=\"flag\"");
            }
            self.body.push('>');
            for cell in &row.cells {
                let mut classes = Vec::new();
                if looks_numeric(&cell.text) {
                    classes.push("n");
                }
                if cell.flagged {
                    classes.push("flag");
                }
                self.body.push_str("<td");
                if let Some(id) = &cell.id {
                    let _ = write!(self.body, " id=\"{}\"", escape(id));
                }
                if !classes.is_empty() {
                    let _ = write!(self.body, " class=\"{}\"", classes.join(" "));
                }
                let _ = write!(self.body, ">{}</td>", escape(&cell.text));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!("{}{}</body></html>\n", self.head, self.body)
    }
}

fn looks_numeric(text: &str) -> bool {
    let t = text.trim_end_matches('%');
    !t.is_empty() && t.parse::<f64>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "<script>alert(\"x\")</script><img src=x onerror='y'>&amp;";

    #[test]
    fn ages_read_as_a_person_says_them() {
        assert_eq!(ago(10_000, 4_000), "6 s ago");
        assert_eq!(ago(10_000, 20_000), "0 s ago", "a clock that stepped back is not the future");
        assert_eq!(ago(600_000, 0), "10 min ago");
        assert_eq!(ago(3 * 3_600_000, 0), "3 h ago");
    }

    #[test]
    fn escape_leaves_no_markup() {
        let e = escape(HOSTILE);
        assert_eq!(
            e,
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=&#39;y&#39;&gt;&amp;amp;"
        );
        assert!(!e.contains(['<', '>', '"', '\'']));
        assert_eq!(escape("plain text, ünïcödé"), "plain text, ünïcödé");
        assert_eq!(escape("bell\u{7}\u{1b}[31m"), "bell\u{fffd}\u{fffd}[31m");
    }

    #[test]
    fn every_text_of_a_page_is_escaped() {
        let mut page = Page::new(HOSTILE, HOSTILE, 10);
        page.figures(&[(HOSTILE, HOSTILE.to_owned(), HOSTILE)]);
        page.heading(HOSTILE);
        page.paragraph(HOSTILE);
        let row = Row::new(vec![Cell::from(HOSTILE).id(HOSTILE).flagged(true)]).key(HOSTILE).flagged(true);
        page.table(HOSTILE, &[HOSTILE], &[row]);
        let html = page.finish();
        // The page's own script is the only one, and no attribute was broken out of.
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        assert!(!html.contains("<img") && !html.contains("onerror='"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)"));
        assert!(html.contains("http-equiv=\"refresh\" content=\"10\""));
    }

    #[test]
    fn numbers_align_right_and_percentages_divide_safely() {
        let mut page = Page::new("t", "s", 5);
        page.table("t", &["a", "b"], &[Row::new(vec![Cell::from(12), Cell::from("nvrtc")])]);
        let html = page.finish();
        assert!(html.contains("<td class=\"n\">12</td><td>nvrtc</td>"), "{html}");
        assert_eq!(percent(1, 4), "25.0%");
        assert_eq!(percent(0, 0), "–");
    }
}

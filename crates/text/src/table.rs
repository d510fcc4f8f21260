//! One table, three renderings: aligned plain text (the seeds' tables, the
//! terminal), a Markdown pipe table padded so that it also reads as plain
//! text, and an HTML `<table>`. A [`Table`] holds a header, rows and each
//! column's alignment; a [`Markup`] backend turns it into text, escaping
//! every cell for its format (hyperfine's exporters are the model: the
//! backends differ only in the few methods they override).

/// Where a column's cells sit; numbers go right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Clone, Debug)]
struct Column {
    header: String,
    align: Align,
    /// The plain-text width at least (the seeds' fixed columns).
    min: usize,
    /// The plain-text width at most: longer cells overflow their column
    /// rather than widening it for every row.
    max: Option<usize>,
}

/// One cell: its text and, for HTML, a class for the `<td>` (`bad`,
/// `good`, `muted`: how the report flags a value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub text: String,
    pub class: Option<&'static str>,
}

impl Cell {
    pub fn flagged(text: impl Into<String>, class: &'static str) -> Cell {
        Cell {
            text: text.into(),
            class: Some(class),
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell { text, class: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::from(text.to_string())
    }
}

/// A header, rows and alignments; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<Cell>>,
    class: Option<&'static str>,
}

impl Table {
    pub fn new() -> Table {
        Table::default()
    }

    /// Add a column.
    pub fn column(mut self, header: impl Into<String>, align: Align) -> Table {
        self.columns.push(Column {
            header: header.into(),
            align,
            min: 0,
            max: None,
        });
        self
    }

    /// Add a left-aligned column.
    pub fn left(self, header: impl Into<String>) -> Table {
        self.column(header, Align::Left)
    }

    /// Add a right-aligned column.
    pub fn right(self, header: impl Into<String>) -> Table {
        self.column(header, Align::Right)
    }

    /// The last column added is at least `width` characters wide in text.
    pub fn min_width(mut self, width: usize) -> Table {
        if let Some(c) = self.columns.last_mut() {
            c.min = width;
        }
        self
    }

    /// The last column added is at most `width` characters wide in text.
    pub fn max_width(mut self, width: usize) -> Table {
        if let Some(c) = self.columns.last_mut() {
            c.max = Some(width);
        }
        self
    }

    /// The HTML `class` of the `<table>`.
    pub fn class(mut self, class: &'static str) -> Table {
        self.class = Some(class);
        self
    }

    /// Append a row; it must have one cell per column.
    pub fn row<C: Into<Cell>>(&mut self, cells: impl IntoIterator<Item = C>) {
        let row: Vec<Cell> = cells.into_iter().map(Into::into).collect();
        debug_assert_eq!(row.len(), self.columns.len(), "one cell per column");
        self.rows.push(row);
    }

    /// Rendered as aligned plain text, columns joined by `sep`.
    pub fn text(&self, sep: &'static str) -> String {
        Text { sep }.render(self)
    }

    /// Rendered as a padded Markdown pipe table.
    pub fn markdown(&self) -> String {
        Markdown.render(self)
    }

    /// Rendered as an HTML `<table>`.
    pub fn html(&self) -> String {
        Html.render(self)
    }
}

/// A table format. [`Markup::render`] escapes the cells, measures the
/// columns and asks for the header, divider and rows in turn; a backend
/// overrides what its format needs.
pub trait Markup {
    /// A cell's text made safe for the format.
    fn escape(&self, text: &str) -> String {
        text.to_string()
    }

    /// The narrowest a column may be.
    fn min_width(&self) -> usize {
        0
    }

    fn begin(&self, _table: &Table) -> String {
        String::new()
    }

    fn header(&self, cells: &[String], layout: &Layout) -> String;

    /// The line between header and rows.
    fn divider(&self, _layout: &Layout) -> String {
        String::new()
    }

    fn row(&self, cells: &[(String, Option<&'static str>)], layout: &Layout) -> String;

    fn end(&self) -> String {
        String::new()
    }

    fn render(&self, table: &Table) -> String {
        let header: Vec<String> = table
            .columns
            .iter()
            .map(|c| self.escape(&c.header))
            .collect();
        let rows: Vec<Vec<(String, Option<&'static str>)>> = table
            .rows
            .iter()
            .map(|r| r.iter().map(|c| (self.escape(&c.text), c.class)).collect())
            .collect();
        let widths = table
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let widest = rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|(t, _)| t.chars().count())
                    .chain([header[i].chars().count(), c.min, self.min_width()])
                    .max()
                    .unwrap_or(0);
                c.max.map_or(widest, |m| widest.min(m))
            })
            .collect();
        let layout = Layout {
            widths,
            aligns: table.columns.iter().map(|c| c.align).collect(),
        };
        let mut out = self.begin(table);
        out.push_str(&self.header(&header, &layout));
        out.push_str(&self.divider(&layout));
        for r in &rows {
            out.push_str(&self.row(r, &layout));
        }
        out.push_str(&self.end());
        out
    }
}

/// Column widths (in characters, after escaping) and alignments.
pub struct Layout {
    pub widths: Vec<usize>,
    pub aligns: Vec<Align>,
}

impl Layout {
    /// `text` padded to column `i`'s width on the side its alignment says.
    pub fn pad(&self, i: usize, text: &str) -> String {
        let w = self.widths.get(i).copied().unwrap_or(0);
        match self.aligns.get(i) {
            Some(Align::Right) => format!("{text:>w$}"),
            _ => format!("{text:<w$}"),
        }
    }
}

/// Aligned plain text: no escaping, no trailing spaces.
pub struct Text {
    pub sep: &'static str,
}

impl Text {
    fn line<'a>(&self, cells: impl Iterator<Item = &'a str>, layout: &Layout) -> String {
        let padded: Vec<String> = cells.enumerate().map(|(i, c)| layout.pad(i, c)).collect();
        let mut s = padded.join(self.sep).trim_end().to_string();
        s.push('\n');
        s
    }
}

impl Markup for Text {
    fn header(&self, cells: &[String], layout: &Layout) -> String {
        self.line(cells.iter().map(String::as_str), layout)
    }

    fn row(&self, cells: &[(String, Option<&'static str>)], layout: &Layout) -> String {
        self.line(cells.iter().map(|(t, _)| t.as_str()), layout)
    }
}

/// A Markdown pipe table padded to read as plain text; cells escaped with
/// [`markdown_escape`] and `|`.
pub struct Markdown;

impl Markdown {
    fn line<'a>(cells: impl Iterator<Item = &'a str>, layout: &Layout) -> String {
        let mut s = String::from("|");
        for (i, c) in cells.enumerate() {
            s.push(' ');
            s.push_str(&layout.pad(i, c));
            s.push_str(" |");
        }
        s.push('\n');
        s
    }
}

impl Markup for Markdown {
    fn escape(&self, text: &str) -> String {
        markdown_escape(text).replace('|', "\\|")
    }

    fn min_width(&self) -> usize {
        3
    }

    fn header(&self, cells: &[String], layout: &Layout) -> String {
        Markdown::line(cells.iter().map(String::as_str), layout)
    }

    fn divider(&self, layout: &Layout) -> String {
        let mut s = String::from("|");
        for (w, a) in layout.widths.iter().zip(&layout.aligns) {
            match a {
                Align::Right => s.push_str(&format!("{}:|", "-".repeat(w + 1))),
                Align::Left => s.push_str(&format!(":{}|", "-".repeat(w + 1))),
            }
        }
        s.push('\n');
        s
    }

    fn row(&self, cells: &[(String, Option<&'static str>)], layout: &Layout) -> String {
        Markdown::line(cells.iter().map(|(t, _)| t.as_str()), layout)
    }
}

/// An HTML `<table>`: cells escaped, numbers (right-aligned columns) in
/// `class="n"` cells, one line per row.
pub struct Html;

impl Markup for Html {
    fn escape(&self, text: &str) -> String {
        html_escape(text)
    }

    fn begin(&self, table: &Table) -> String {
        match table.class {
            Some(c) => format!("<table class=\"{c}\">"),
            None => "<table>".into(),
        }
    }

    fn header(&self, cells: &[String], layout: &Layout) -> String {
        let mut s = String::from("<tr>");
        for (c, a) in cells.iter().zip(&layout.aligns) {
            match a {
                Align::Right => s.push_str(&format!("<th class=\"n\">{c}</th>")),
                Align::Left => s.push_str(&format!("<th>{c}</th>")),
            }
        }
        s.push_str("</tr>\n");
        s
    }

    fn row(&self, cells: &[(String, Option<&'static str>)], layout: &Layout) -> String {
        let mut s = String::from("<tr>");
        for ((c, class), a) in cells.iter().zip(&layout.aligns) {
            let class = class.or((*a == Align::Right).then_some("n"));
            match class {
                Some(k) => s.push_str(&format!("<td class=\"{k}\">{c}</td>")),
                None => s.push_str(&format!("<td>{c}</td>")),
            }
        }
        s.push_str("</tr>\n");
        s
    }

    fn end(&self) -> String {
        "</table>".into()
    }
}

/// `text` safe inside HTML element content and quoted attribute values.
pub fn html_escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&#39;"),
            _ => s.push(ch),
        }
    }
    s
}

/// User text (a tag, a run name, a note) made inert in Markdown: the
/// characters that open HTML, entities, links, code or emphasis anywhere in
/// a line get a backslash (CommonMark renders `\<` as `<`). An underscore
/// inside a word (`folio_lookups`) cannot open emphasis and stays as it is,
/// so names read unchanged.
pub fn markdown_escape(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut s = String::with_capacity(text.len());
    for (i, &ch) in chars.iter().enumerate() {
        let word = |j: Option<usize>| {
            j.and_then(|j| chars.get(j))
                .is_some_and(|c| c.is_alphanumeric())
        };
        let escape = match ch {
            '\\' | '`' | '*' | '<' | '&' | '[' | ']' => true,
            '_' => !(word(i.checked_sub(1)) && word(Some(i + 1))),
            _ => false,
        };
        if escape {
            s.push('\\');
        }
        s.push(ch);
    }
    s
}

/// `text` as one Markdown code span, whatever backticks it holds: the
/// fence is one backtick longer than its longest run of them (CommonMark).
pub fn markdown_code(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if longest == 0 {
        format!("{fence}{text}{fence}")
    } else {
        format!("{fence} {text} {fence}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new().right("size_kib").left("layout");
        t.row(["4", "100% 4K"]);
        t.row(["4096", "1x2M"]);
        t
    }

    #[test]
    fn text_aligns_without_trailing_spaces() {
        assert_eq!(
            sample().text(" | "),
            "size_kib | layout\n       4 | 100% 4K\n    4096 | 1x2M\n"
        );
    }

    #[test]
    fn text_widths_have_a_floor_and_a_ceiling() {
        let mut t = Table::new()
            .right("a")
            .min_width(4)
            .left("b")
            .max_width(3)
            .left("c");
        t.row(["1", "long", "x"]);
        t.row(["2", "ok", "y"]);
        assert_eq!(t.text("  "), "   a  b    c\n   1  long  x\n   2  ok   y\n");
    }

    #[test]
    fn markdown_pads_aligns_and_escapes() {
        assert_eq!(
            sample().markdown(),
            "| size_kib | layout  |\n|---------:|:--------|\n|        4 | 100% 4K |\n|     4096 | 1x2M    |\n"
        );
        let mut t = Table::new().left("tag");
        t.row(["a|b <img onerror=x>"]);
        assert_eq!(
            t.markdown(),
            "| tag                   |\n|:----------------------|\n| a\\|b \\<img onerror=x> |\n"
        );
    }

    #[test]
    fn html_escapes_and_flags() {
        let mut t = Table::new().left("tag").right("n").class("kv");
        t.row([Cell::from("<script>"), Cell::flagged("7", "bad")]);
        assert_eq!(
            t.html(),
            "<table class=\"kv\"><tr><th>tag</th><th class=\"n\">n</th></tr>\n\
             <tr><td>&lt;script&gt;</td><td class=\"bad\">7</td></tr>\n</table>"
        );
    }

    #[test]
    fn markdown_escape_leaves_names_and_arrows() {
        assert_eq!(markdown_escape("folio_lookups 1->3"), "folio_lookups 1->3");
        assert_eq!(
            markdown_escape("_x_ *y* [l](u)"),
            "\\_x\\_ \\*y\\* \\[l\\](u)"
        );
        assert_eq!(
            markdown_escape("<img src=x onerror=alert(1)>"),
            "\\<img src=x onerror=alert(1)>"
        );
        assert_eq!(markdown_escape("a & b"), "a \\& b");
    }

    #[test]
    fn code_spans_hold_backticks() {
        assert_eq!(markdown_code("ptelab show 1"), "`ptelab show 1`");
        assert_eq!(markdown_code("echo `x`"), "`` echo `x` ``");
    }
}

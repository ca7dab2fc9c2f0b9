//! Text tables for people: every column as wide as its longest cell (the
//! header included), two spaces between columns, names left-aligned and
//! numbers right-aligned under their header. A name longer than the others
//! (`server_cpu_stall`) widens its column instead of pushing its row's
//! numbers out from under their headers.

use std::fmt::Write as _;

/// How a column's cells sit under its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Names and text: the cell starts where the header starts.
    Left,
    /// Numbers: the cell ends where the header ends.
    Right,
}

/// Space between two columns. Two, so that a cell may hold single spaces
/// (`uplink ± 1.35`, `+20.0% [+1.0% +3.0%]`) and a reader (or a test)
/// still tells the columns apart.
pub const GAP: &str = "  ";

/// A table under construction: its header, then rows of cells.
#[derive(Clone, Debug, Default)]
pub struct Table {
    indent: usize,
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table indented by `indent` spaces with these columns.
    pub fn new(indent: usize, columns: &[(&str, Align)]) -> Table {
        Table {
            indent,
            columns: columns
                .iter()
                .map(|(h, a)| ((*h).to_string(), *a))
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing trailing cells are empty, extra ones are dropped.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// No rows yet.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The header and the rows, one line each (trailing spaces cut).
    pub fn write(&self, s: &mut String) {
        let width = |j: usize| {
            let cells = self
                .rows
                .iter()
                .filter_map(|r| r.get(j))
                .map(|c| c.chars().count());
            cells
                .chain([self.columns[j].0.chars().count()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.columns.len()).map(width).collect();
        let header: Vec<String> = self.columns.iter().map(|(h, _)| h.clone()).collect();
        for cells in std::iter::once(&header).chain(self.rows.iter()) {
            let mut line = " ".repeat(self.indent);
            for (j, (_, align)) in self.columns.iter().enumerate() {
                let cell = cells.get(j).map_or("", String::as_str);
                let w = widths[j];
                if j > 0 {
                    line.push_str(GAP);
                }
                match align {
                    Align::Left => {
                        let _ = write!(line, "{cell:<w$}");
                    }
                    Align::Right => {
                        let _ = write!(line, "{cell:>w$}");
                    }
                }
            }
            let _ = writeln!(s, "{}", line.trim_end());
        }
    }

    /// The table as text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_longest_cell() {
        let mut t = Table::new(
            2,
            &[
                ("stage (ms)", Align::Left),
                ("n", Align::Right),
                ("p50", Align::Right),
            ],
        );
        t.row(vec!["infer".into(), "290".into(), "12.283".into()]);
        t.row(vec![
            "server_cpu_stall".into(),
            "290".into(),
            "12.533".into(),
        ]);
        assert_eq!(
            t.text(),
            "  stage (ms)          n     p50\n  infer             290  12.283\n  server_cpu_stall  290  12.533\n"
        );
    }
}

//! Readable tables for listing commands (`--json` prints the data instead).

/// Prints rows under headers (comfy-table, borderless): columns two spaces apart, padded to
/// their widest cell, never wrapped; cells longer than 60 characters are cut with `…`.
pub fn print(headers: &[&str], rows: &[Vec<String>]) {
    println!("{}", render(headers, rows));
}

fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    const CELL_MAX: usize = 60;
    let cut = |cell: &str| -> String {
        let cell = cell.replace('\n', " ");
        if cell.chars().count() > CELL_MAX {
            let mut short: String = cell.chars().take(CELL_MAX - 1).collect();
            short.push('…');
            short
        } else {
            cell
        }
    };
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(headers.iter().copied());
    for row in rows {
        table.add_row(row.iter().map(|cell| cut(cell)));
    }
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if i + 1 == headers.len() { 0 } else { 2 }));
    }
    table
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `Some(x)` as text, `None` as `-`.
pub fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn columns_line_up_and_long_cells_are_cut() {
        let long = "x".repeat(70);
        let rows = vec![
            vec!["1".to_owned(), "short".to_owned(), "a".to_owned()],
            vec!["22".to_owned(), long, "b\nc".to_owned()],
        ];
        let text = render(&["ID", "WHAT", "NOTE"], &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], format!("ID  WHAT{}  NOTE", " ".repeat(56)));
        assert_eq!(lines[1], format!("1   short{}  a", " ".repeat(55)));
        assert!(
            lines[2].starts_with("22  xxxx") && lines[2].contains('…') && lines[2].ends_with("b c")
        );
        assert_eq!(lines[2].chars().count(), 4 + 60 + 2 + 3);
    }
}

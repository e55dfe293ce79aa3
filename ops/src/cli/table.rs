//! Readable tables for listing commands (`--json` prints the data instead).

/// Prints rows under headers, columns padded to their widest cell; long cells are cut.
pub fn print(headers: &[&str], rows: &[Vec<String>]) {
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
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| cut(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = widths[i]))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

/// `Some(x)` as text, `None` as `-`.
pub fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

//! CSV files of numbers: features, then the class in the last column. Whether the first line
//! is a header is set (`data.header`) or, unset, decided from the line itself: a header when
//! none of its cells is a number, data when all are, and an error naming the line when it is
//! some of each (a header with a numeric name, or a row with a typo: only the user knows).

use std::path::Path;

use super::FeatureTable;
use crate::error::{Error, Result};

/// Reads `path` into a feature table; `header` says whether its first line is a header (none:
/// decided from the line).
pub fn read_csv(path: &Path, header: Option<bool>) -> Result<FeatureTable> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::Data {
        path: path.to_owned(),
        detail: format!("cannot read the CSV file: {err}"),
    })?;
    let bad = |line: usize, detail: String| Error::Data {
        path: path.to_owned(),
        detail: format!("line {line}: {detail}"),
    };
    let mut rows = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .peekable();
    let parse = |line: &str| -> Option<Vec<f64>> {
        line.split(',')
            .map(|f| f.trim().parse::<f64>().ok())
            .collect()
    };
    if let Some(&(number, first)) = rows.peek() {
        let cells: Vec<bool> = first
            .split(',')
            .map(|f| f.trim().parse::<f64>().is_ok())
            .collect();
        let is_header = match header {
            Some(given) => given,
            None if cells.iter().all(|numeric| !numeric) => true,
            None if cells.iter().all(|numeric| *numeric) => false,
            None => {
                return Err(bad(
                    number + 1,
                    format!(
                        "`{first}` mixes numbers and text: set data.header = true if it is a \
                         header, or mend the row"
                    ),
                ));
            }
        };
        if is_header {
            rows.next();
        }
    }
    let (mut values, mut labels, mut dim) = (Vec::new(), Vec::new(), None);
    for (number, line) in rows {
        let line_no = number + 1;
        let fields = parse(line).ok_or_else(|| bad(line_no, format!("`{line}` is not numbers")))?;
        let Some((&class, features)) = fields.split_last() else {
            continue;
        };
        if features.is_empty() {
            return Err(bad(line_no, "a class but no features".into()));
        }
        match dim {
            None => dim = Some(features.len()),
            Some(d) if d != features.len() => {
                return Err(bad(
                    line_no,
                    format!("{} features where earlier lines have {d}", features.len()),
                ));
            }
            Some(_) => {}
        }
        if class < 0.0 || class.fract() != 0.0 || class > f64::from(u16::MAX) {
            return Err(bad(
                line_no,
                format!("class {class} is not a small whole number"),
            ));
        }
        if features.iter().any(|v| !v.is_finite()) {
            return Err(bad(line_no, "a feature is not finite".into()));
        }
        values.extend(features.iter().map(|&v| v as f32));
        labels.push(class as u32);
    }
    let dim = dim.ok_or_else(|| Error::Data {
        path: path.to_owned(),
        detail: "no rows".into(),
    })?;
    Ok(FeatureTable {
        dim,
        classes: labels.iter().max().map_or(0, |&c| c as usize + 1),
        values,
        labels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_with_or_without_a_header_and_bad_lines_are_named() {
        let path = std::env::temp_dir().join(format!("headroom-csv-{}.csv", std::process::id()));
        std::fs::write(&path, "x,y,label\n0.5,1,0\n\n-2,3e1,2\n").unwrap();
        let table = read_csv(&path, None).unwrap();
        assert_eq!((table.dim, table.classes), (2, 3));
        assert_eq!(table.values, [0.5, 1.0, -2.0, 30.0]);
        assert_eq!(table.labels, [0, 2]);
        std::fs::write(&path, "1,2,0\n1,2,3,1\n").unwrap();
        assert!(
            read_csv(&path, None)
                .unwrap_err()
                .to_string()
                .contains("line 2")
        );
        std::fs::write(&path, "1,2,0.5\n").unwrap();
        assert!(
            read_csv(&path, None)
                .unwrap_err()
                .to_string()
                .contains("class 0.5")
        );
        std::fs::write(&path, "1,2,0\n1,oops,1\n").unwrap();
        assert!(
            read_csv(&path, None)
                .unwrap_err()
                .to_string()
                .contains("oops")
        );
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn a_first_row_with_one_text_cell_is_never_dropped_silently() {
        let path = std::env::temp_dir().join(format!("headroom-csv-h-{}.csv", std::process::id()));
        // A data row with a typo: an error naming it, not a header dropped without a word.
        std::fs::write(&path, "1,2o,0\n3,4,1\n").unwrap();
        let err = read_csv(&path, None).unwrap_err().to_string();
        assert!(
            err.contains("line 1") && err.contains("data.header"),
            "{err}"
        );
        // A header with a numeric column name, declared.
        std::fs::write(&path, "x,2024,label\n1,2,0\n3,4,1\n").unwrap();
        assert_eq!(read_csv(&path, Some(true)).unwrap().labels, [0, 1]);
        // Declared as data, a first row that is all numbers stays.
        std::fs::write(&path, "1,2,0\n3,4,1\n").unwrap();
        assert_eq!(read_csv(&path, Some(false)).unwrap().labels, [0, 1]);
        assert_eq!(read_csv(&path, None).unwrap().labels, [0, 1]);
        std::fs::remove_file(&path).ok();
    }
}

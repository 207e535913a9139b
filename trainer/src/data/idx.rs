//! IDX files, the format of MNIST: big-endian headers, then unsigned bytes.

use std::path::Path;

use super::FeatureTable;
use crate::error::{Error, Result};

/// The magic of an IDX file of unsigned bytes with `dims` dimensions.
fn magic(dims: u8) -> [u8; 4] {
    [0, 0, 0x08, dims]
}

/// The dimensions and the bytes of an IDX file of unsigned bytes.
fn read_file(path: &Path) -> Result<(Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).map_err(|err| Error::Data {
        path: path.to_owned(),
        detail: format!("cannot read the IDX file: {err}"),
    })?;
    let bad = |detail: String| Error::Data {
        path: path.to_owned(),
        detail,
    };
    let header = bytes.get(..4).ok_or_else(|| {
        bad(format!(
            "{} bytes is too short for an IDX header",
            bytes.len()
        ))
    })?;
    let dims = header[3];
    if header != magic(dims) || !(1..=4).contains(&dims) {
        return Err(bad(format!(
            "magic {header:02x?} is not that of an IDX file of unsigned bytes (00 00 08 0n)"
        )));
    }
    let sizes_end = 4 + 4 * dims as usize;
    let sizes: Vec<usize> = bytes
        .get(4..sizes_end)
        .ok_or_else(|| bad("the header is cut short".into()))?
        .chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let expected = sizes.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let data = &bytes[sizes_end..];
    if expected != Some(data.len()) {
        return Err(bad(format!(
            "the header promises {sizes:?} bytes of data ({}), the file holds {}",
            expected.map_or_else(|| "too many".into(), |n| n.to_string()),
            data.len()
        )));
    }
    Ok((sizes, data.to_vec()))
}

/// Images (`[n, ...]` bytes, scaled to `[0, 1]`) and their labels (`[n]`) as a feature table.
pub fn read_idx(images: &Path, labels: &Path) -> Result<FeatureTable> {
    let (image_dims, pixels) = read_file(images)?;
    let (label_dims, classes) = read_file(labels)?;
    if label_dims.len() != 1 || label_dims[0] != image_dims[0] {
        return Err(Error::Data {
            path: labels.to_owned(),
            detail: format!(
                "{label_dims:?} labels for {} images: one label per image expected",
                image_dims[0]
            ),
        });
    }
    if image_dims[0] == 0 {
        return Err(Error::Data {
            path: images.to_owned(),
            detail: "no images".into(),
        });
    }
    let dim = image_dims[1..].iter().product();
    Ok(FeatureTable {
        dim,
        classes: classes.iter().copied().max().map_or(0, |c| c as usize + 1),
        values: pixels.iter().map(|&p| f32::from(p) / 255.0).collect(),
        labels: classes.iter().map(|&c| u32::from(c)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut bytes = magic(dims.len() as u8).to_vec();
        for d in dims {
            bytes.extend(d.to_be_bytes());
        }
        bytes.extend(data);
        bytes
    }

    #[test]
    fn images_and_labels_are_read_and_bad_files_are_named() {
        let dir = std::env::temp_dir().join(format!("headroom-idx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (images, labels) = (dir.join("images"), dir.join("labels"));
        std::fs::write(&images, idx(&[2, 2, 2], &[0, 255, 51, 102, 1, 2, 3, 4])).unwrap();
        std::fs::write(&labels, idx(&[2], &[7, 3])).unwrap();
        let table = read_idx(&images, &labels).unwrap();
        assert_eq!((table.dim, table.classes), (4, 8));
        assert_eq!(table.values[..4], [0.0, 1.0, 0.2, 0.4]);
        assert_eq!(table.labels, [7, 3]);
        std::fs::write(&labels, idx(&[3], &[1, 2, 3])).unwrap();
        assert!(
            read_idx(&images, &labels)
                .unwrap_err()
                .to_string()
                .contains("labels")
        );
        std::fs::write(&images, idx(&[2, 2, 2], &[0, 1, 2])).unwrap();
        let err = read_idx(&images, &labels).unwrap_err().to_string();
        assert!(err.contains("promises"), "{err}");
        std::fs::write(&images, b"PK\x03\x04 not idx").unwrap();
        assert!(
            read_idx(&images, &labels)
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

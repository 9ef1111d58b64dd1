//! The one reader of what the probe programs print (the C++ probes, the
//! Rust API's probe, the Python scripts, the mlx-rs proof): lines of
//! `<kind> <value> <key> <value> ...`, e.g.
//! `cycle 3 retained_bytes 0 digest ff3733f69f575250` or
//! `census 3 descriptors_retained 0`. Other lines are not records.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The first word; its value is the field of the same name.
    pub kind: String,
    pub fields: BTreeMap<String, String>,
}

impl Record {
    pub fn value(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    pub fn number(&self, key: &str) -> Option<i64> {
        self.value(key)?.parse().ok()
    }

    /// The field, or a panic naming the record (for tests).
    pub fn get(&self, key: &str) -> &str {
        self.value(key)
            .unwrap_or_else(|| panic!("record `{}` has no `{key}`: {:?}", self.kind, self.fields))
    }

    /// The field as an integer, or a panic naming the record (for tests).
    pub fn int(&self, key: &str) -> i64 {
        self.number(key).unwrap_or_else(|| {
            panic!(
                "`{key}` of `{}` is not an integer: {:?}",
                self.kind, self.fields
            )
        })
    }
}

/// Every record in a program's output, in order. A record is a lowercase
/// kind and key-value pairs: either the kind carries a value of its own
/// (`cycle 0 retained_bytes ...`, an even number of words) or it does not
/// (`summary cycles 10 retained_mib_per_cycle 24.00 ...`, an odd number).
/// A line of the second shape with no number among its values is prose.
pub fn parse_records(stdout: &str) -> Vec<Record> {
    stdout
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() < 2 || !words[0].chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                return None;
            }
            let pairs = if words.len().is_multiple_of(2) {
                &words[..]
            } else {
                &words[1..]
            };
            let fields: std::collections::BTreeMap<String, String> = pairs
                .chunks(2)
                .map(|kv| (kv[0].to_string(), kv[1].to_string()))
                .collect();
            if !words.len().is_multiple_of(2)
                && !fields.iter().any(|(_, v)| v.parse::<f64>().is_ok())
            {
                return None;
            }
            Some(Record {
                kind: words[0].to_string(),
                fields,
            })
        })
        .collect()
}

/// The records of one kind.
pub fn records_of<'a>(
    records: &'a [Record],
    kind: &'a str,
) -> impl Iterator<Item = &'a Record> + 'a {
    records.iter().filter(move |r| r.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cycles_and_the_census_and_skips_prose() {
        let out = "The report's scenario:\ncycle 0 retained_bytes 25165824 digest ff37\ncensus 0 descriptors_retained 120\nan odd number of words\nsummary cycles 10 retained_mib_per_cycle 24.00 digest ff37\n";
        let r = parse_records(out);
        assert_eq!(r.len(), 3, "{r:?}");
        let summary = records_of(&r, "summary").next().unwrap();
        assert_eq!(
            (
                summary.number("cycles"),
                summary.get("retained_mib_per_cycle")
            ),
            (Some(10), "24.00")
        );
        assert_eq!(
            (
                r[0].kind.as_str(),
                r[0].int("retained_bytes"),
                r[0].get("digest")
            ),
            ("cycle", 25165824, "ff37")
        );
        assert_eq!(
            records_of(&r, "census")
                .next()
                .unwrap()
                .number("descriptors_retained"),
            Some(120)
        );
        assert_eq!(r[0].number("digest"), None);
    }
}

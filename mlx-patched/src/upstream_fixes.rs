//! Upstream's bug fixes between the bases (`mlx_facts::upstream_fixes`),
//! checked here against the patch series.

pub use mlx_facts::upstream_fixes::*;

#[cfg(test)]
mod tests {
    use super::*;
    use Carried::*;
    use crate::patch;
    use std::collections::BTreeSet;

    #[test]
    fn every_id_is_one_row() {
        let mut seen = BTreeSet::new();
        for f in FIXES {
            assert!(seen.insert(f.id), "{} is two rows", f.id);
        }
    }

    /// The table and the series agree: each backport it names is a patch
    /// that says upstream has the fix, and each such patch is one row's.
    #[test]
    fn the_table_names_each_carried_back_patch_once() {
        let series = patch::series(&patch::series_dir()).unwrap();
        let stems: Vec<String> = series
            .iter()
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        let theirs: BTreeSet<String> = patch::carried_back(&series)
            .unwrap()
            .iter()
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        let mut named = BTreeSet::new();
        for f in FIXES {
            match f.carried {
                Backport(stem) => {
                    assert!(
                        theirs.contains(stem),
                        "{}: `{stem}` is not a patch with an `Upstream-since:` line",
                        f.id
                    );
                    assert!(
                        named.insert(stem),
                        "{}: `{stem}` is another row's too",
                        f.id
                    );
                }
                SeriesFix(stem) => {
                    assert!(
                        stems.iter().any(|s| s == stem),
                        "{}: `{stem}` is not a patch",
                        f.id
                    );
                    assert!(
                        !theirs.contains(stem),
                        "{}: `{stem}` is the fork's, yet says upstream's",
                        f.id
                    );
                    assert!(
                        crate::pin::BASES.iter().any(|b| b.fixes_upstream(stem)),
                        "{}: no base's row leaves `{stem}` out",
                        f.id
                    );
                }
                No(why) => assert!(!why.is_empty(), "{}: say why it is not carried", f.id),
            }
        }
        let unnamed: Vec<&String> = theirs
            .iter()
            .filter(|s| !named.contains(s.as_str()))
            .collect();
        assert!(unnamed.is_empty(), "no row names {unnamed:?}");
    }
}

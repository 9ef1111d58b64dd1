//! Every generated page is what its generator writes now.

use crate::workspace;

#[test]
fn every_generated_page_is_current() {
    let pages = [
        (
            mlx_patched::VARIABLES_PAGE,
            mlx_patched::variables_markdown(),
        ),
        (mlx_fuzz::primitives::PAGE, mlx_fuzz::primitives::markdown()),
        (
            mlx_patched::upstream_fixes::PAGE,
            mlx_patched::upstream_fixes::markdown(),
        ),
    ];
    for (page, rendered) in pages {
        let path = workspace().join(page);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text == rendered,
            "{} is not what the code's table declares: run `cargo xtask docs`",
            path.display()
        );
    }
    // The figures and phrases of hand-written pages that a table decides.
    for page in mlx_workflows::docs::FRAGMENT_PAGES {
        let path = workspace().join(page);
        let text = std::fs::read_to_string(&path).unwrap();
        let filled = mlx_workflows::docs::fill(&text).unwrap();
        assert!(
            text == filled,
            "{}: a fragment (`<!-- facts:… -->`) is not what the code's tables say now: run `cargo xtask docs`",
            path.display()
        );
        assert!(text.contains("<!-- facts:"), "{page} holds no fragment");
    }
}

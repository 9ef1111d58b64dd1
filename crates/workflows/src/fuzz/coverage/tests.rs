use super::*;

fn report(json: &str) -> GcovrReport {
    serde_json::from_str(json).unwrap()
}

/// Whole files count every code line; a function scope only the lines
/// of the functions it names, found by their first lines.
#[test]
fn reach_counts_lines_and_branches_of_a_scope() {
    let r = report(
        r#"{"files": [
          {"file": "mlx/array.cpp", "functions": [],
           "lines": [
             {"line_number": 1, "count": 3, "branches": [{"count": 1}, {"count": 0}]},
             {"line_number": 2, "count": 0, "branches": []},
             {"line_number": 3, "count": 0, "gcovr_noncode": true}
           ]},
          {"file": "mlx/primitives.cpp",
           "functions": [
             {"demangled_name": "mlx::core::Split::vmap(std::vector<mlx::core::array> const&)", "lineno": 10},
             {"demangled_name": "mlx::core::Abs::vjp(std::vector<mlx::core::array> const&)", "lineno": 20}
           ],
           "lines": [
             {"line_number": 11, "count": 1, "branches": [{"count": 2}]},
             {"line_number": 12, "count": 0},
             {"line_number": 21, "count": 5}
           ]}
        ]}"#,
    );
    let scopes = scopes();
    assert_eq!(
        reach(&r, &scopes[0]),
        Reach {
            lines: 1,
            lines_total: 2,
            branches: 1,
            branches_total: 2
        }
    );
    // Abs has one output: its vjp is not counted.
    assert_eq!(
        reach(&r, &scopes[3]),
        Reach {
            lines: 1,
            lines_total: 2,
            branches: 1,
            branches_total: 1
        }
    );
    assert_eq!(reach(&r, &scopes[1]), Reach::default());
    let table = render(&[("a".into(), r)], &[]);
    assert!(table.contains("| `mlx/array.cpp` | 1/2 lines (50.0%), 1/2 branches (50.0%) |"));
}

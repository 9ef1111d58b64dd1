use super::*;

fn compared(variant: Variant, equal: bool) -> Comparison {
    Comparison { variant, frames: 8, slices: false, equal, said: String::new() }
}

fn shape(variant: Variant, lazy: bool, added: i64) -> SecondShape {
    SecondShape { variant, lazy, one: 1000, two: 1000 + added, weights: 1000 }
}

/// The fork as measured: equal masks, 0.1% for a second shape but for the
/// control's lazy copy, the tests green.
fn as_measured() -> Evidence {
    let mut e = Evidence::default();
    for v in [Variant::PRISTINE, Variant::PATCHED] {
        e.compared.push(compared(v, true));
        e.shapes.push(shape(v, false, 1));
        e.shapes.push(shape(v, true, if v == Variant::PRISTINE { 990 } else { 1 }));
    }
    e.tests.success = true;
    e
}

#[test]
fn the_fork_as_measured_passes_every_claim() {
    let t = judge(&as_measured());
    assert!(t.failures.is_empty(), "{:?}", t.failures);
    assert_eq!(t.passed, 7);
    assert_eq!(render(&as_measured()).len(), 6);
}

#[test]
fn a_different_mask_a_costly_shape_a_blind_control_or_red_tests_fail() {
    let mut e = as_measured();
    e.compared[1].equal = false;
    assert_eq!(judge(&e).failures.len(), 1);

    let mut e = as_measured();
    e.shapes[2] = shape(Variant::PATCHED, false, 100);
    assert_eq!(judge(&e).failures.len(), 1, "a second shape costing 10% on patched");

    let mut e = as_measured();
    e.shapes[1] = shape(Variant::PRISTINE, true, 1);
    assert_eq!(judge(&e).failures.len(), 1, "a control that shows no lazy copy proves nothing");

    let mut e = as_measured();
    e.tests.success = false;
    assert_eq!(judge(&e).failures.len(), 1);
}

//! The fork's checks: each runs its client on the variants (collect), turns
//! the evidence into claims (`judge`) and into the table's rows (`render`).
//! The suite's slow-check tests and xtask's `*-check` commands call them.

pub mod base_record;
pub mod build_plan;
pub mod git_dependency;
pub mod mlx_audio;
pub mod mlx_lm;
pub mod mlx_rs;
pub mod mossformer2;
pub mod pip_installs;
pub mod provenance;
pub mod python;
pub mod real_model;

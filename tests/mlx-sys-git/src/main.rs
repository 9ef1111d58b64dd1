//! Prints what the second crate of the graph, `mlx-sys-git-dependent`,
//! got from mlx-sys: `dependent variant <name> version <release> twice <x>`.
//! The variant is the fork's own metadata (the published crate gives none),
//! and `twice` is 1.5 + 1.5 computed through mlx-c from that crate.

fn main() {
    let twice = mlx_sys_git_dependent::twice(1.5);
    println!(
        "dependent variant {} version {} twice {twice}",
        mlx_sys_git_dependent::VARIANT,
        mlx_sys_git_dependent::VERSION
    );
    if twice != 3.0 {
        std::process::exit(1);
    }
}

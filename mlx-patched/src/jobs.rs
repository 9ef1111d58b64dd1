//! The MLX compile inside Cargo's jobserver. A build script already holds
//! one of Cargo's `-j` tokens; Debian 12's ninja (1.11) is no jobserver
//! client, so the compile runs with that token plus as many more as Cargo
//! hands over within a short wait, up to the job limit (`NUM_JOBS` or
//! `MLX_PATCHED_JOBS`), and holds them until the compile ends. Outside a
//! build script, or without a jobserver, the limit is the job count.

use crate::Env;
use jobserver::{Acquired, Client};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// How long a compile waits for Cargo to free tokens before it starts with
/// those it has: rustc jobs running beside it end within seconds, and the
/// compile it sizes takes minutes.
pub const WAIT: Duration = Duration::from_secs(10);

/// Cargo's jobserver, when this process is a build script run with one.
pub fn cargo_jobserver(env: &Env) -> Option<&'static Client> {
    static CLIENT: OnceLock<Option<Client>> = OnceLock::new();
    if !env.is_build_script() {
        return None;
    }
    CLIENT
        .get_or_init(|| {
            // SAFETY: the descriptors `CARGO_MAKEFLAGS` names are the ones
            // Cargo passed to this build script, which never closes them,
            // so they cannot name another file; `check_pipe` makes the
            // crate verify they are a pipe or fifo before it uses them.
            unsafe { Client::from_env_ext(true) }.client.ok()
        })
        .as_ref()
}

/// The tokens one compile runs with; given back to Cargo when dropped.
pub struct Tokens {
    held: Vec<Acquired>,
    jobs: usize,
}

impl Tokens {
    /// The parallelism these tokens allow.
    pub fn jobs(&self) -> usize {
        self.jobs
    }

    /// How many came from the jobserver (beside the one the process holds).
    pub fn acquired(&self) -> usize {
        self.held.len()
    }
}

/// Up to `limit` jobs: the process's own token plus up to `limit - 1` more
/// from `client`, as many as it gives within `wait`. Without a client,
/// `limit` jobs.
pub fn acquire(client: Option<&Client>, limit: usize, wait: Duration) -> Tokens {
    let limit = limit.max(1);
    let Some(client) = client else {
        return Tokens {
            held: Vec::new(),
            jobs: limit,
        };
    };
    let want = limit - 1;
    let mut held = Vec::new();
    if want > 0 {
        let (tx, rx) = mpsc::channel();
        match client.clone().into_helper_thread(move |token| {
            // A token that arrives after the wait goes back at once: the
            // receiver is gone, and the failed send drops it.
            let _ = tx.send(token);
        }) {
            Ok(helper) => {
                for _ in 0..want {
                    helper.request_token();
                }
                let deadline = Instant::now() + wait;
                while held.len() < want {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(left) {
                        Ok(Ok(token)) => held.push(token),
                        _ => break,
                    }
                }
                drop(helper);
                // Tokens that arrived while the helper stopped.
                while let Ok(Ok(token)) = rx.try_recv() {
                    if held.len() < want {
                        held.push(token);
                    }
                }
            }
            // No helper thread: whatever the jobserver has free right now.
            Err(_) => {
                while held.len() < want {
                    match client.try_acquire() {
                        Ok(Some(token)) => held.push(token),
                        _ => break,
                    }
                }
            }
        }
    }
    Tokens {
        jobs: 1 + held.len(),
        held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many tokens `client` has free (`try_acquire` needs a
    /// non-blocking jobserver, which `Client::new` is not).
    fn free(client: &Client) -> usize {
        acquire(Some(client), 64, Duration::from_millis(200)).acquired()
    }

    #[test]
    fn a_compile_takes_what_the_jobserver_has_free_and_gives_it_back() {
        let client = Client::new(3).unwrap();
        // Another job holds one of the three.
        let busy = client.acquire().unwrap();
        let tokens = acquire(Some(&client), 8, Duration::from_millis(300));
        assert_eq!((tokens.acquired(), tokens.jobs()), (2, 3));
        assert_eq!(free(&client), 0, "it holds them");
        drop(tokens);
        drop(busy);
        assert_eq!(free(&client), 3, "all given back");
    }

    #[test]
    fn the_limit_bounds_what_a_compile_takes() {
        let client = Client::new(4).unwrap();
        let tokens = acquire(Some(&client), 2, Duration::from_millis(300));
        assert_eq!((tokens.acquired(), tokens.jobs()), (1, 2));
        let one = acquire(Some(&client), 1, Duration::from_millis(300));
        assert_eq!(one.jobs(), 1);
        drop((tokens, one));
        assert_eq!(free(&client), 4);
    }

    #[test]
    fn a_token_freed_during_the_wait_is_taken() {
        let client = Client::new(1).unwrap();
        let busy = client.acquire().unwrap();
        let freeing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(busy);
        });
        let tokens = acquire(Some(&client), 2, Duration::from_secs(5));
        freeing.join().unwrap();
        assert_eq!(tokens.jobs(), 2);
        drop(tokens);
        assert_eq!(free(&client), 1);
    }

    #[test]
    fn without_a_jobserver_the_limit_is_the_job_count() {
        assert_eq!(acquire(None, 6, WAIT).jobs(), 6);
        assert_eq!(acquire(None, 0, WAIT).jobs(), 1);
        assert!(cargo_jobserver(&Env::process()).is_none());
    }

    /// What a build script sees: Cargo passes its jobserver through
    /// `CARGO_MAKEFLAGS`, as `Client::configure` does for this child (the
    /// test binary again, running only the test below).
    #[test]
    fn a_build_script_joins_the_jobserver_its_parent_passes() {
        let client = Client::new(2).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args([
            "--exact",
            "jobs::tests::child_of_a_jobserver",
            "--ignored",
            "--nocapture",
        ]);
        client.configure(&mut child);
        let out = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("joined: 3 jobs, 2 acquired"), "{stdout}");
        assert_eq!(free(&client), 2, "the child gave its tokens back");
    }

    #[test]
    #[ignore = "run by a_build_script_joins_the_jobserver_its_parent_passes"]
    fn child_of_a_jobserver() {
        // Run on its own (`--include-ignored`) it has no jobserver to join.
        let Some(client) = cargo_jobserver(&Env::build_script()) else {
            println!("no jobserver");
            return;
        };
        // The parent created two tokens and holds none; this process,
        // unlike a build script, holds none of its own either.
        let tokens = acquire(Some(client), 3, Duration::from_secs(5));
        println!(
            "joined: {} jobs, {} acquired",
            tokens.jobs(),
            tokens.acquired()
        );
    }
}

//! `stage <dir>`: prepares a run directory for a worker in `wrangler dev` exactly as the
//! end-to-end harness does (`exactly_tests::stage`): the run's `wrangler.toml` and its local D1
//! state, copied from the migrated template. The console's browser test starts its worker
//! from it.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: stage <run directory>");
        return ExitCode::from(2);
    };
    exactly_tests::stage(Path::new(&dir), &[]);
    ExitCode::SUCCESS
}

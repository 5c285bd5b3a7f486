//! The development signing keys `make dev` writes next to `.dev.vars`.

use std::path::Path;

use crate::telnyx;

/// The default location, relative to the project root.
pub const DEFAULT_PATH: &str = ".dev.keys";

/// Reads the Telnyx signer from a `.dev.keys` file (`TELNYX_PRIVATE_SEED=<base64>`).
pub fn telnyx_signer(path: &Path) -> Result<telnyx::Signer, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e} (run `make dev` once to create it)", path.display()))?;
    let seed = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("TELNYX_PRIVATE_SEED="))
        .ok_or_else(|| format!("{} has no TELNYX_PRIVATE_SEED line", path.display()))?;
    telnyx::Signer::from_base64_seed(seed).map_err(|e| format!("{}: {e}", path.display()))
}

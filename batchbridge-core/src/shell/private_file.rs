//! Files that hold a credential or a helper for a moment: created with their final mode,
//! so no other user can read them even while they are written. Its own module because
//! every kind of login writes them (keys, askpass helpers, keytabs, jump host configs).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::Result;

/// Writes `contents` to a new file that has `mode` from its creation on, never a wider one.
pub(super) fn write_private(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?
        .write_all(contents)?;
    // The umask may have narrowed `mode` (an askpass helper must stay executable).
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

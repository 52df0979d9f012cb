//! Prints the batchbridge CRDs as YAML, or with `--write [DIR]` writes one file per CRD into
//! DIR (default: `deploy/crds` of the workspace). The printed text is the files' contents,
//! concatenated in file-name order, so CI can diff it against the checked-in files
//! (tests/run.sh).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use batchbridge_operator::crd::{crd_file_name, crd_yaml, crds};

const USAGE: &str = "usage: crdgen [--write [DIR]]";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("crdgen: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let write_to = match args.as_slice() {
        [] => None,
        [flag] if flag == "--write" => Some(default_dir()),
        [flag, dir] if flag == "--write" => Some(PathBuf::from(dir)),
        [flag] if flag == "-h" || flag == "--help" => {
            println_usage()?;
            return Ok(());
        }
        _ => return Err(USAGE.into()),
    };

    // In file-name order, the order `cat deploy/crds/*.yaml` prints them in.
    let mut crds = crds();
    crds.sort_by_key(crd_file_name);
    let mut stdout = std::io::stdout().lock();
    for crd in crds {
        let yaml = crd_yaml(&crd)?;
        match &write_to {
            None => stdout.write_all(yaml.as_bytes())?,
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                let path = dir.join(crd_file_name(&crd));
                std::fs::write(&path, yaml)?;
                writeln!(stdout, "wrote {}", path.display())?;
            }
        }
    }
    Ok(())
}

/// `deploy/crds` of the workspace this binary was built in.
fn default_dir() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .unwrap_or(manifest_dir)
        .join("deploy")
        .join("crds")
}

fn println_usage() -> std::io::Result<()> {
    writeln!(std::io::stdout(), "{USAGE}")
}

//! `sluice generate` (hidden, for packagers): writes the man pages and the
//! shell completions of the command line it is part of, so that
//! `scripts/deb` can ship them.
//!
//! - `sluice generate man DIR`: `sluice.1` and a page per subcommand
//!   (`sluice-serve.1`, …)
//! - `sluice generate completions SHELL DIR`: the completion script of
//!   `bash`, `zsh`, `fish`, `elvish` or `powershell`
//!
//! Hidden subcommands (this one) are left out of both.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap_complete::Shell;

/// The arguments of `sluice generate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// The man pages: `sluice.1` and one per subcommand.
    Man {
        /// The folder to write them into (created if missing).
        dir: PathBuf,
    },
    /// A shell's completion script.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
        /// The folder to write it into (created if missing).
        dir: PathBuf,
    },
}

/// Runs `sluice generate` for `cli`, the whole command line: prints each
/// file written and exits 0, or says why not and exits 1.
pub fn run(args: Args, cli: &clap::Command) -> ExitCode {
    let documented = documented(cli);
    let written = match args.what {
        What::Man { dir } => create(&dir).and_then(|()| man(documented, &dir)),
        What::Completions { shell, dir } => {
            create(&dir).and_then(|()| completions(documented, shell, &dir))
        }
    };
    match written {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice generate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `cli` without its hidden subcommands: clap_mangen skips them, but
/// clap_complete would offer them. clap has no way to take a subcommand
/// out, so the top level is built anew, under the binary's name and
/// version (`sluice --version`'s).
fn documented(cli: &clap::Command) -> clap::Command {
    let mut cmd = clap::Command::new(env!("CARGO_BIN_NAME"))
        .version(crate::VERSION)
        .args(cli.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(cli.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
        .subcommand_required(cli.is_subcommand_required_set());
    if let Some(about) = cli.get_about() {
        cmd = cmd.about(about.clone());
    }
    if let Some(about) = cli.get_long_about() {
        cmd = cmd.long_about(about.clone());
    }
    cmd
}

fn create(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// Writes `sluice.1` and the subcommands' pages into `dir` (as
/// `clap_mangen::generate_to` does, but naming the files written).
fn man(cmd: clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    fn pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            pages(sub, dir, written)?;
        }
        written.push(clap_mangen::Man::new(cmd).generate_to(dir)?);
        Ok(())
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    pages(cmd, dir, &mut written)
        .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
    written.sort();
    Ok(written)
}

/// Writes `shell`'s completion script into `dir`, named as clap_complete
/// names it (`sluice.bash`, `_sluice`, `sluice.fish`, …).
fn completions(mut cmd: clap::Command, shell: Shell, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let name = cmd.get_name().to_owned();
    let file = clap_complete::generate_to(shell, &mut cmd, name, dir).with_context(|| {
        format!(
            "cannot write the {shell} completions into {}",
            dir.display()
        )
    })?;
    Ok(vec![file])
}

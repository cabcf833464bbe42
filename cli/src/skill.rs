//! `memscape skill`: the agent skill (`skills/memscape/SKILL.md`, in the Agent Skills format)
//! printed, or installed as `DIR/memscape/SKILL.md` for an agent that reads skills from a
//! folder. The file is built into the binary, so every install has it.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

/// The skill, as in the repository.
pub(crate) const SKILL: &str = include_str!("../../skills/memscape/SKILL.md");

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Write it to DIR/memscape/SKILL.md (e.g. ~/.claude/skills) instead of printing it. A
    /// different file already there is not overwritten.
    #[arg(long, value_name = "DIR")]
    install: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let Some(dir) = args.install else {
        print!("{SKILL}");
        return Ok(());
    };
    let folder = dir.join("memscape");
    let path = folder.join("SKILL.md");
    match std::fs::read_to_string(&path) {
        Ok(old) if old == SKILL => {
            println!("{} is already this skill", path.display());
            return Ok(());
        }
        Ok(_) => bail!("{}: a different skill is there; remove it first to install this one", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("{}: cannot read", path.display())),
    }
    std::fs::create_dir_all(&folder).with_context(|| format!("{}: cannot create", folder.display()))?;
    std::fs::write(&path, SKILL).with_context(|| format!("{}: cannot write", path.display()))?;
    println!("installed {}", path.display());
    Ok(())
}

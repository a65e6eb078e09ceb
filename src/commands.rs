//! `dispatch`: each subcommand to its file under commands/, one file a
//! command (`pipe cache push|pull|status` in remote.rs, `pipe runs
//! ACTION` and `pipe tag` in labels.rs, `pipe run -m` in sweep.rs).

mod cache;
mod checkout;
mod compare;
mod dag;
mod diff;
mod init;
mod init_from_dvc;
mod labels;
mod remote;
mod run;
mod runs;
mod show;
mod stages;
mod status;
mod sweep;
mod validate;
mod why;

use pipe_engine::{ExitCode, Result};

use crate::cli::{CacheCommand, Cli, Command};
use crate::output::out;
use crate::remote_flags::Shown;
use crate::run_setup::file_and_targets;

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let quiet = cli.quiet;
    match cli.command {
        Command::Run(args) => {
            let (file, targets) = file_and_targets(&args);
            if args.multirun {
                sweep::sweep(&args, targets, file.as_deref(), quiet)
            } else {
                run::run(args, targets, file, quiet)
            }
        }
        Command::Status {
            path,
            pipeline,
            json,
            stale,
            remote,
        } => status::status(path, pipeline, json, stale, remote.as_deref()),
        Command::Why {
            targets,
            pipeline,
            json,
        } => why::why(&targets, pipeline, json),
        Command::Dag {
            path,
            pipeline,
            format,
        } => dag::dag(path.as_deref(), &pipeline, format),
        Command::Validate { path, pipeline } => validate::validate(path.as_deref(), &pipeline),
        Command::Runs {
            action: Some(action),
            ..
        } => labels::runs_action(action),
        Command::Runs { limit, json, .. } => runs::runs(limit, json),
        Command::Tag { run, tags, rm } => labels::tag(&run, &tags, rm),
        Command::Show { run, json, open } => show::show(&run, json, open.as_deref()),
        Command::Compare(args) => compare::compare_command(args),
        Command::Diff {
            a,
            b,
            pipeline,
            json,
            md,
            all,
            directions,
        } => diff::diff(a, b, pipeline, directions, diff::Shape { json, md, all }),
        Command::Checkout {
            run,
            file,
            link,
            force,
        } => checkout::checkout(run, file, link, force),
        Command::Apply {
            run,
            row,
            file,
            link,
            force,
        } => checkout::apply(run, row, file, link, force),
        Command::Cache { command } => cache(command, quiet),
        Command::Stages { check: true, .. } => stages::check_stages(quiet),
        Command::Stages { name, json, .. } => stages::stages(name.as_deref(), json),
        Command::Init {
            path,
            from_dvc: true,
            ..
        } => init_from_dvc::init_from_dvc(path.as_deref()),
        Command::Init { path, template, .. } => init::init(path.as_deref(), template),
        Command::Completions { shell } => {
            let script = crate::complete::registration(shell);
            out!("{}", String::from_utf8_lossy(&script));
            Ok(ExitCode::Ok)
        }
        Command::SettleGitDirty {
            runs_db,
            run_id,
            work_tree,
        } => {
            pipe_engine::settle_git_dirty(&runs_db, run_id, &work_tree)?;
            Ok(ExitCode::Ok)
        }
    }
}

fn cache(command: CacheCommand, quiet: bool) -> Result<ExitCode> {
    match command {
        CacheCommand::Verify { json, repair } => cache::verify(json, repair),
        CacheCommand::Gc {
            pipeline,
            keep_runs,
            grace_secs,
            remote,
        } => cache::gc(&pipeline, keep_runs, grace_secs, &remote),
        CacheCommand::Push {
            run,
            all,
            file,
            remote,
            json,
        } => remote::push(
            run.as_deref(),
            all,
            file.as_deref(),
            &remote,
            Shown { json, quiet },
        ),
        CacheCommand::Pull {
            run,
            all,
            file,
            remote,
            json,
        } => remote::pull(
            run.as_deref(),
            all,
            file.as_deref(),
            &remote,
            Shown { json, quiet },
        ),
        CacheCommand::Status {
            run,
            file,
            remote,
            json,
        } => remote::status(run.as_deref(), file.as_deref(), &remote, json),
    }
}

//! Which part this process plays in a data-parallel run, read from its
//! environment as torchrun's and Lightning's ranks read theirs:
//!
//! - [`Role::Solo`]: one device, no process group.
//! - [`Role::Launcher`]: `devices: N` on one machine, and nobody started
//!   the ranks: this process starts N rank processes (`crate::launch`) and
//!   trains nothing itself, as torchrun's agent.
//! - [`Role::Rank`]: one of the N. Started by a launcher (`PIPE_RANK`,
//!   `PIPE_WORLD_SIZE`, `PIPE_MASTER_ADDR`, `PIPE_MASTER_PORT`), or by
//!   Slurm's `srun`, one task per device on every node (`SLURM_PROCID`,
//!   `SLURM_NTASKS`, `SLURM_LOCALID`, the first host of
//!   `SLURM_JOB_NODELIST`), as Lightning's `SLURMEnvironment` reads them,
//!   or by a launcher that speaks torchrun's convention (torchrun itself,
//!   a Kubernetes PyTorch job operator: `RANK`, `WORLD_SIZE`,
//!   `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), as Lightning's
//!   `TorchElasticEnvironment` and torch's `env://` read them.

use std::collections::HashMap;
use std::time::Duration;

use crate::c10d::Rendezvous;

/// Set by [`crate::launch`] on the ranks it starts.
pub const RANK_ENV: &str = "PIPE_RANK";
pub const LOCAL_RANK_ENV: &str = "PIPE_LOCAL_RANK";
pub const WORLD_SIZE_ENV: &str = "PIPE_WORLD_SIZE";
pub const MASTER_ADDR_ENV: &str = "PIPE_MASTER_ADDR";
/// Also read under Slurm, where the engine's batch script may choose it.
pub const MASTER_PORT_ENV: &str = "PIPE_MASTER_PORT";

/// Why this process cannot tell its place in the run: its environment
/// contradicts itself or the stage's params.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    #[error("{name}=`{value}` is not a whole number")]
    NotANumber { name: String, value: String },
    #[error("{set} is set but {missing} is not")]
    Incomplete {
        set: &'static str,
        missing: &'static str,
    },
    #[error("{0} is not set")]
    NotSet(&'static str),
    #[error("`num_nodes: {nodes}`, but pipe's launcher starts ranks on this machine only")]
    LauncherAcrossNodes { nodes: usize },
    #[error(
        "{RANK_ENV}={rank} and {WORLD_SIZE_ENV}={world} do not fit `devices: {devices_per_node}`"
    )]
    RankOutsideDevices {
        rank: usize,
        world: usize,
        devices_per_node: usize,
    },
    #[error("srun started the tasks on {slurm_nodes} node(s), but `num_nodes` is {nodes}")]
    SrunNodes { slurm_nodes: usize, nodes: usize },
    #[error(
        "srun started {slurm_tasks} tasks on {nodes} node(s), but `devices: {devices_per_node}` \
         on {nodes} node(s) is {world} ranks"
    )]
    SrunTasks {
        slurm_tasks: usize,
        nodes: usize,
        devices_per_node: usize,
        world: usize,
    },
    #[error(
        "`num_nodes: {nodes}` needs one process per device on every node, started by Slurm's srun \
         or by a launcher of torchrun's convention (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); \
         this process was started by neither"
    )]
    NotAnSrunTask { nodes: usize },
    #[error(
        "the launcher started rank {rank} of {world} ({local_world} on this node), but \
         `devices: {devices_per_node}` on `num_nodes: {nodes}` is {devices_per_node} per node, \
         {} in all",
        devices_per_node * nodes
    )]
    LaunchedRanks {
        rank: usize,
        world: usize,
        local_world: usize,
        devices_per_node: usize,
        nodes: usize,
    },
    #[error("{0} is not a TCP port")]
    NotAPort(usize),
    #[error("cannot read the Slurm host list `{0}`")]
    HostList(String),
}

#[derive(Debug, Clone)]
pub enum Role {
    Solo,
    Launcher,
    Rank(RankPlace),
}

/// A rank's place in its group.
#[derive(Debug, Clone)]
pub struct RankPlace {
    pub rendezvous: Rendezvous,
    /// Index among the ranks of this machine: which of its GPUs it drives.
    pub local_rank: usize,
    pub nodes: usize,
    /// Who started the ranks, for messages: `pipe` or `srun`.
    pub launched_by: &'static str,
}

/// The role of this process in a run of `devices_per_node` replicas per
/// machine, from the environment `env` (the process's, in the worker).
pub fn role(
    devices_per_node: usize,
    nodes: usize,
    timeout: Duration,
    env: &HashMap<String, String>,
) -> Result<Role, RoleError> {
    let get = |name: &str| env_value(env, name);
    let number = |name: &str| env_number(env, name);
    if let Some(rank) = number(RANK_ENV)? {
        let incomplete = |missing| RoleError::Incomplete {
            set: RANK_ENV,
            missing,
        };
        let world = number(WORLD_SIZE_ENV)?.ok_or(incomplete(WORLD_SIZE_ENV))?;
        let port = number(MASTER_PORT_ENV)?.ok_or(incomplete(MASTER_PORT_ENV))?;
        let host = get(MASTER_ADDR_ENV).unwrap_or("127.0.0.1").to_string();
        if nodes > 1 {
            return Err(RoleError::LauncherAcrossNodes { nodes });
        }
        if rank >= world || world != devices_per_node {
            return Err(RoleError::RankOutsideDevices {
                rank,
                world,
                devices_per_node,
            });
        }
        return Ok(Role::Rank(RankPlace {
            rendezvous: Rendezvous {
                host,
                port: port_number(port)?,
                serve_store: false,
                rank,
                world_size: world,
                interface_host: "127.0.0.1".into(),
                store_prefix: String::new(),
                timeout,
            },
            local_rank: number(LOCAL_RANK_ENV)?.unwrap_or(rank),
            nodes: 1,
            launched_by: "pipe",
        }));
    }
    if let Some(rank) = number("RANK")? {
        return torchrun_rank(rank, devices_per_node, nodes, timeout, env);
    }
    // A task of `srun` (which sets the step id; the batch script itself,
    // where SLURM_PROCID is 0 too, does not) among several.
    let slurm_tasks = number("SLURM_NTASKS")?.unwrap_or(1);
    let in_step = get("SLURM_STEP_ID").or(get("SLURM_STEPID")).is_some();
    if slurm_tasks > 1 && in_step {
        let slurm_nodes = number("SLURM_NNODES")?.unwrap_or(1).max(1);
        if slurm_nodes != nodes {
            return Err(RoleError::SrunNodes { slurm_nodes, nodes });
        }
        let world = devices_per_node * nodes;
        if slurm_tasks != world {
            return Err(RoleError::SrunTasks {
                slurm_tasks,
                nodes,
                devices_per_node,
                world,
            });
        }
        let rank = number("SLURM_PROCID")?.ok_or(RoleError::NotSet("SLURM_PROCID"))?;
        let nodelist = get("SLURM_JOB_NODELIST")
            .or(get("SLURM_STEP_NODELIST"))
            .or(get("SLURM_NODELIST"))
            .ok_or(RoleError::NotSet("SLURM_JOB_NODELIST"))?;
        let host = first_host(nodelist)?;
        let port = match number(MASTER_PORT_ENV)? {
            Some(port) => port_number(port)?,
            None => {
                // Lightning's choice: a port from the job id, so that every
                // task derives the same one and two jobs rarely collide.
                let job = number("SLURM_JOB_ID")?.unwrap_or(0);
                15000 + (job % 20000) as u16
            }
        };
        return Ok(Role::Rank(RankPlace {
            rendezvous: Rendezvous {
                host: host.clone(),
                port,
                serve_store: rank == 0,
                rank,
                world_size: world,
                // Several nodes: Gloo binds the address the host name
                // resolves to (or GLOO_SOCKET_IFNAME's), as torch does.
                interface_host: String::new(),
                store_prefix: String::new(),
                timeout,
            },
            local_rank: number("SLURM_LOCALID")?.unwrap_or(rank % devices_per_node),
            nodes,
            launched_by: "srun",
        }));
    }
    if nodes > 1 {
        return Err(RoleError::NotAnSrunTask { nodes });
    }
    Ok(if devices_per_node > 1 {
        Role::Launcher
    } else {
        Role::Solo
    })
}

/// A rank started by a launcher of torchrun's convention: torchrun on
/// every node (`--nnodes`, `--nproc-per-node`), or one process per pod of
/// a Kubernetes PyTorch job. Rank 0 hosts the TCPStore at
/// MASTER_ADDR:MASTER_PORT, unless torchrun's agent already does
/// (`TORCHELASTIC_USE_AGENT_STORE`), in which case every rank is a client
/// and the group's keys live under `/worker/attempt_<restart count>`, as
/// torch's `env://` rendezvous puts them.
fn torchrun_rank(
    rank: usize,
    devices_per_node: usize,
    nodes: usize,
    timeout: Duration,
    env: &HashMap<String, String>,
) -> Result<Role, RoleError> {
    let get = |name: &str| env_value(env, name);
    let number = |name: &str| env_number(env, name);
    let incomplete = |missing| RoleError::Incomplete {
        set: "RANK",
        missing,
    };
    let world = number("WORLD_SIZE")?.ok_or(incomplete("WORLD_SIZE"))?;
    let host = get("MASTER_ADDR")
        .ok_or(incomplete("MASTER_ADDR"))?
        .to_string();
    let port = port_number(number("MASTER_PORT")?.ok_or(incomplete("MASTER_PORT"))?)?;
    let expected = devices_per_node * nodes;
    let local_world = number("LOCAL_WORLD_SIZE")?.unwrap_or(devices_per_node);
    if world != expected || local_world != devices_per_node || rank >= world {
        return Err(RoleError::LaunchedRanks {
            rank,
            world,
            local_world,
            devices_per_node,
            nodes,
        });
    }
    let agent_store = get("TORCHELASTIC_USE_AGENT_STORE")
        .is_some_and(|value| value.eq_ignore_ascii_case("true") || value == "1");
    let store_prefix = if agent_store {
        format!(
            "/worker/attempt_{}",
            number("TORCHELASTIC_RESTART_COUNT")?.unwrap_or(0)
        )
    } else {
        String::new()
    };
    // Ranks that meet on a loopback address share one machine: Gloo binds
    // that, not whatever the host name resolves to.
    let loopback = host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|address| address.is_loopback())
        || host == "localhost";
    Ok(Role::Rank(RankPlace {
        rendezvous: Rendezvous {
            host,
            port,
            serve_store: rank == 0 && !agent_store,
            rank,
            world_size: world,
            interface_host: if loopback {
                "127.0.0.1".into()
            } else {
                String::new()
            },
            store_prefix,
            timeout,
        },
        local_rank: number("LOCAL_RANK")?.unwrap_or(rank % devices_per_node),
        nodes,
        launched_by: "torchrun",
    }))
}

/// A variable of `env`, unless unset or empty.
fn env_value<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    env.get(name).map(String::as_str).filter(|v| !v.is_empty())
}

/// A whole number in `env`, if set.
fn env_number(env: &HashMap<String, String>, name: &str) -> Result<Option<usize>, RoleError> {
    env_value(env, name)
        .map(|value| {
            value
                .trim()
                .parse::<usize>()
                .map_err(|_| RoleError::NotANumber {
                    name: name.to_string(),
                    value: value.to_string(),
                })
        })
        .transpose()
}

fn port_number(port: usize) -> Result<u16, RoleError> {
    u16::try_from(port)
        .ok()
        .filter(|port| *port > 0)
        .ok_or(RoleError::NotAPort(port))
}

/// The first host of a Slurm host list: `node[07-09,12],gpu1` gives
/// `node07`, keeping the zero padding, as `scontrol show hostnames` would
/// list it first.
pub fn first_host(list: &str) -> Result<String, RoleError> {
    let bad = || RoleError::HostList(list.to_string());
    let mut host = String::new();
    let mut rest = list.trim();
    loop {
        match rest.find([',', '[']) {
            None => {
                host.push_str(rest);
                break;
            }
            Some(at) if rest.as_bytes()[at] == b',' => {
                host.push_str(&rest[..at]);
                break;
            }
            Some(at) => {
                host.push_str(&rest[..at]);
                let close = rest[at..].find(']').ok_or_else(bad)? + at;
                let ranges = &rest[at + 1..close];
                let first = ranges.split(',').next().unwrap_or("");
                let first = first.split('-').next().unwrap_or("");
                if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                host.push_str(first);
                rest = &rest[close + 1..];
            }
        }
    }
    if host.is_empty() {
        return Err(bad());
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const T: Duration = Duration::from_secs(60);

    #[test]
    fn the_first_host_of_slurm_host_lists() {
        assert_eq!(first_host("node1").unwrap(), "node1");
        assert_eq!(first_host("node[07-09,12],gpu1").unwrap(), "node07");
        assert_eq!(first_host("gpu1,node[2-3]").unwrap(), "gpu1");
        assert_eq!(first_host("rack[1-2]-n[003-004]").unwrap(), "rack1-n003");
        assert!(first_host("node[").is_err());
        assert!(first_host("").is_err());
        assert!(first_host("n[a-b]").is_err());
    }

    #[test]
    fn one_device_is_solo_and_several_launch_unless_a_launcher_or_srun_started_us() {
        assert!(matches!(role(1, 1, T, &env(&[])), Ok(Role::Solo)));
        assert!(matches!(role(2, 1, T, &env(&[])), Ok(Role::Launcher)));
        // The batch script of a 2-task job is not a rank: no step id.
        assert!(matches!(
            role(
                2,
                1,
                T,
                &env(&[("SLURM_NTASKS", "2"), ("SLURM_PROCID", "0")])
            ),
            Ok(Role::Launcher)
        ));
        let Ok(Role::Rank(place)) = role(
            3,
            1,
            T,
            &env(&[
                (RANK_ENV, "2"),
                (WORLD_SIZE_ENV, "3"),
                (MASTER_ADDR_ENV, "127.0.0.1"),
                (MASTER_PORT_ENV, "4000"),
            ]),
        ) else {
            panic!("not a rank")
        };
        assert_eq!(
            (
                place.rendezvous.rank,
                place.rendezvous.world_size,
                place.rendezvous.port
            ),
            (2, 3, 4000)
        );
        assert!(!place.rendezvous.serve_store);
    }

    /// torchrun's environment on the second of two nodes of 2 ranks each,
    /// with its agent hosting the store; and a Kubernetes job's pod, whose
    /// rank 0 hosts it.
    #[test]
    fn ranks_of_a_torchrun_style_launcher_read_their_place_from_its_environment() {
        let torchrun = env(&[
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ]);
        let Ok(Role::Rank(place)) = role(2, 2, T, &torchrun) else {
            panic!("not a rank")
        };
        let rendezvous = &place.rendezvous;
        assert_eq!(
            (
                rendezvous.rank,
                rendezvous.world_size,
                place.local_rank,
                place.nodes
            ),
            (3, 4, 1, 2)
        );
        assert_eq!(
            (rendezvous.host.as_str(), rendezvous.port),
            ("node0", 29500)
        );
        assert!(!rendezvous.serve_store, "torchrun's agent hosts the store");
        assert_eq!(rendezvous.store_prefix, "/worker/attempt_2");
        assert_eq!(
            (rendezvous.interface_host.as_str(), place.launched_by),
            ("", "torchrun")
        );
        let pod = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "23456"),
        ]);
        let Ok(Role::Rank(place)) = role(1, 2, T, &pod) else {
            panic!("not a rank")
        };
        assert!(place.rendezvous.serve_store && place.rendezvous.store_prefix.is_empty());
        assert_eq!(place.rendezvous.interface_host, "127.0.0.1");
        let error = role(2, 2, T, &pod).unwrap_err().to_string();
        assert!(
            error.contains("rank 0 of 2") && error.contains("4 in all"),
            "{error}"
        );
        let mut partial = pod.clone();
        partial.remove("MASTER_PORT");
        let error = role(1, 2, T, &partial).unwrap_err().to_string();
        assert_eq!(error, "RANK is set but MASTER_PORT is not");
    }

    #[test]
    fn srun_tasks_read_their_place_from_slurm() {
        let slurm = env(&[
            ("SLURM_NTASKS", "4"),
            ("SLURM_NNODES", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_JOB_NODELIST", "gpu[03-04]"),
        ]);
        let Ok(Role::Rank(place)) = role(2, 2, T, &slurm) else {
            panic!("not a rank")
        };
        assert_eq!(place.rendezvous.host, "gpu03");
        assert_eq!(place.rendezvous.port, 15000 + 1234);
        assert!(place.rendezvous.serve_store);
        assert_eq!((place.rendezvous.world_size, place.nodes), (4, 2));
        let error = role(3, 2, T, &slurm).unwrap_err().to_string();
        assert!(
            error.contains("4 tasks") && error.contains("6 ranks"),
            "{error}"
        );
        let error = role(2, 1, T, &slurm).unwrap_err().to_string();
        assert!(error.contains("num_nodes"), "{error}");
        // Outside srun, several nodes cannot be reached.
        let error = role(2, 2, T, &env(&[])).unwrap_err().to_string();
        assert!(error.contains("srun"), "{error}");
    }
}

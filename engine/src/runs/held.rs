//! Which recorded run holds a result: the run whose results a sweep that
//! found everything in place repeats, and the run whose output a
//! workspace file is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use pipe_cache::{Artifact, ObjectDigest};
use rusqlite::params;

use super::db::RunDb;
use super::record::{Columns, StageRecord};
use crate::project_files::ProjectPath;
use crate::run_id::RunId;
use crate::Result;

/// The recorded runs that hold a set of results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultsHeld {
    /// The newest run that holds every one when there is one; else the
    /// newest holder of each, each run once, oldest first.
    pub runs: Vec<RunId>,
    /// Whether every result is in some run's record.
    pub every: bool,
}

impl ResultsHeld {
    fn of(keys: &[String], holders: &HashMap<String, BTreeSet<RunId>>) -> ResultsHeld {
        let every = keys.iter().all(|key| holders.contains_key(key));
        if keys.is_empty() {
            return ResultsHeld::default();
        }
        if every {
            let mut common = holders[&keys[0]].clone();
            for key in &keys[1..] {
                common.retain(|run| holders[key].contains(run));
            }
            if let Some(&newest) = common.last() {
                return ResultsHeld {
                    runs: vec![newest],
                    every,
                };
            }
        }
        let newest: BTreeSet<RunId> = holders
            .values()
            .filter_map(|runs| runs.last().copied())
            .collect();
        ResultsHeld {
            runs: newest.into_iter().collect(),
            every,
        }
    }
}

/// The statuses of a stage row that had a result.
const HAD_A_RESULT: &str = "('ran', 'restored', 'fresh')";

impl RunDb {
    /// The runs whose records hold the results of `stages`, by key (a
    /// result is the same whatever its stage was named in the run that
    /// made it: `train` in one, `train@lr=1` in a sweep's). Stages
    /// without a key are left out. One pass over the rows of those keys,
    /// a few hundred keys at a time.
    pub fn runs_holding(&self, stages: &[StageRecord]) -> Result<ResultsHeld> {
        let mut keys: Vec<String> = stages
            .iter()
            .filter_map(|stage| Some(stage.key?.to_hex()))
            .collect();
        keys.sort();
        keys.dedup();
        let mut holders: HashMap<String, BTreeSet<RunId>> = HashMap::new();
        for chunk in keys.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let mut statement = self
                .connection
                .prepare(&format!(
                    "SELECT run_id, key FROM stage_runs WHERE key IN ({marks}) \
                     AND status IN {HAD_A_RESULT}"
                ))
                .map_err(|e| self.error(e))?;
            let mut rows = statement
                .query(rusqlite::params_from_iter(chunk))
                .map_err(|e| self.error(e))?;
            while let Some(row) = rows.next().map_err(|e| self.error(e))? {
                let run: RunId = row.get(0).map_err(|e| self.error(e))?;
                let key: String = row.get(1).map_err(|e| self.error(e))?;
                holders.entry(key).or_default().insert(run);
            }
        }
        Ok(ResultsHeld::of(&keys, &holders))
    }

    /// The newest run of `pipeline` other than `except` whose record says
    /// that stage `base_name` (or one of its expansions, `train@lr=1`)
    /// made `path` with `digest`: whose result a workspace file is. Only
    /// the newest records of the stage are searched, as
    /// [`RunDb::run_that_made`] does.
    pub fn run_that_made_output(
        &self,
        pipeline: &str,
        base_name: &str,
        path: &str,
        digest: &ObjectDigest,
        except: RunId,
    ) -> Result<Option<RunId>> {
        const SEARCHED: i64 = 200;
        // The expansions of `train` are the names from `train@` up to, not
        // including, `train@` followed by the largest character: a range
        // of the (stage, run_id) index.
        let expansions_from = format!("{base_name}@");
        let expansions_to = format!("{base_name}@{}", char::MAX);
        let mut statement = self
            .connection
            .prepare_cached(&format!(
                "SELECT s.run_id, s.stage, s.outputs FROM stage_runs s JOIN runs r ON r.id = s.run_id
                 WHERE (s.stage = ?2 OR (s.stage >= ?3 AND s.stage < ?4)) AND r.pipeline = ?1
                 AND s.run_id != ?5 AND s.status IN {HAD_A_RESULT}
                 ORDER BY s.run_id DESC LIMIT ?6"
            ))
            .map_err(|e| self.error(e))?;
        let mut rows = statement
            .query(params![
                pipeline,
                base_name,
                expansions_from,
                expansions_to,
                except,
                SEARCHED
            ])
            .map_err(|e| self.error(e))?;
        while let Some(row) = rows.next().map_err(|e| self.error(e))? {
            let columns = Columns {
                row,
                path: &self.path,
                run: row.get("run_id").map_err(|e| self.error(e))?,
                stage: row.get("stage").ok(),
                prefix: "",
            };
            let outputs: BTreeMap<ProjectPath, Artifact> = columns.json("outputs")?;
            if outputs
                .get(path)
                .is_some_and(|artifact| artifact.digest == *digest)
            {
                return Ok(Some(columns.run));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holders(pairs: &[(&str, &[i64])]) -> (Vec<String>, HashMap<String, BTreeSet<RunId>>) {
        let keys = pairs.iter().map(|(key, _)| key.to_string()).collect();
        let held = pairs
            .iter()
            .filter(|(_, runs)| !runs.is_empty())
            .map(|(key, runs)| {
                (
                    key.to_string(),
                    runs.iter().map(|&run| RunId(run)).collect(),
                )
            })
            .collect();
        (keys, held)
    }

    #[test]
    fn the_newest_run_that_holds_every_result_is_named_alone() {
        let (keys, held) = holders(&[("a", &[1, 3, 5]), ("b", &[1, 3]), ("c", &[3, 4])]);
        assert_eq!(
            ResultsHeld::of(&keys, &held),
            ResultsHeld {
                runs: vec![RunId(3)],
                every: true
            }
        );
    }

    #[test]
    fn without_one_run_holding_them_all_each_results_newest_holder_is_named() {
        let (keys, held) = holders(&[("a", &[1, 5]), ("b", &[2]), ("c", &[2, 5])]);
        assert_eq!(
            ResultsHeld::of(&keys, &held),
            ResultsHeld {
                runs: vec![RunId(2), RunId(5)],
                every: true
            }
        );
        let (keys, held) = holders(&[("a", &[1]), ("b", &[])]);
        assert_eq!(
            ResultsHeld::of(&keys, &held),
            ResultsHeld {
                runs: vec![RunId(1)],
                every: false
            }
        );
        assert_eq!(
            ResultsHeld::of(&[], &HashMap::new()),
            ResultsHeld::default()
        );
    }
}

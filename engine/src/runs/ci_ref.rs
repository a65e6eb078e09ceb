//! The branch a CI job builds, as its CI says it: a pull request's job
//! checks out a merge commit or a detached HEAD that no branch names, so
//! the run is filed under the branch people know. Read from the variables
//! the common CIs set, first found wins; docs/ci.md lists them.

/// Each variable and whether it names the branch only in some jobs (a
/// pull request's, a branch build's).
const BRANCH_VARIABLES: &[&str] = &[
    // pipe's own, for a CI not listed here.
    "PIPE_BRANCH",
    // GitHub Actions: the head branch of a pull request.
    "GITHUB_HEAD_REF",
    // GitLab: a merge request's source branch, else the branch built.
    "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME",
    "CI_COMMIT_BRANCH",
    // Buildkite, CircleCI, Jenkins, Azure Pipelines, Bitbucket.
    "BUILDKITE_BRANCH",
    "CIRCLE_BRANCH",
    "BRANCH_NAME",
    "BUILD_SOURCEBRANCHNAME",
    "BITBUCKET_BRANCH",
];

/// The longest branch name recorded; a longer value is not a branch.
const LONGEST: usize = 255;

/// The branch the CI job builds, when a CI says so.
pub fn ci_branch() -> Option<String> {
    let from_list = BRANCH_VARIABLES
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| usable(value)));
    from_list.or_else(github_branch_build)
}

/// GitHub Actions on a push: `GITHUB_REF_NAME` when `GITHUB_REF_TYPE`
/// says it is a branch (a tag's name is no branch).
fn github_branch_build() -> Option<String> {
    let kind = std::env::var("GITHUB_REF_TYPE").ok()?;
    (kind == "branch")
        .then(|| std::env::var("GITHUB_REF_NAME").ok())
        .flatten()
        .filter(|value| usable(value))
}

/// A value that can be a branch name: what git allows, within reason,
/// and nothing a terminal would act on.
pub(super) fn usable(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= LONGEST
        && !value.starts_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
}

/// Where the head of the merged branch is, in a job that runs a merge of
/// a branch into its base (a pull request's merge commit).
pub enum MergedHead {
    /// GitLab's merged-results pipelines name it.
    Named(String),
    /// GitHub's: the merge commit's second parent.
    SecondParent,
}

/// The merged head of this job, as its CI says; `None` outside such a
/// job, and without asking git.
pub fn merged_head() -> Option<MergedHead> {
    let is_commit = |value: &str| value.len() == 40 && value.bytes().all(|b| b.is_ascii_hexdigit());
    if let Ok(sha) = std::env::var("CI_MERGE_REQUEST_SOURCE_BRANCH_SHA") {
        if is_commit(&sha) {
            return Some(MergedHead::Named(sha));
        }
    }
    let event = std::env::var("GITHUB_EVENT_NAME").ok()?;
    event
        .starts_with("pull_request")
        .then_some(MergedHead::SecondParent)
}

#[cfg(test)]
mod tests {
    use super::usable;

    #[test]
    fn a_branch_from_the_environment_is_a_name_git_allows_and_no_terminal_acts_on() {
        assert!(usable("main") && usable("feature/lr-tune") && usable("v1.2-fix"));
        for bad in [
            "",
            "-x",
            "a b",
            "a\u{1b}[31m",
            "x~1",
            "a:b",
            &"x".repeat(300),
        ] {
            assert!(!usable(bad), "{bad:?}");
        }
    }
}

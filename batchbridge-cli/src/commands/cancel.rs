//! `cancel`: end jobs; a job that had already ended is left as it is, and said to have.

use super::context::{Context, unknown_job};
use crate::exit::CliResult;
use crate::{describe, terminal};

/// `cancel`: each job in turn, each problem printed; returns the worst problem's code.
pub(super) async fn cancel(context: &mut Context, references: &[String]) -> CliResult<u8> {
    let mut worst = 0;
    for (cluster, id, reference) in context.resolve_all(references)? {
        let cancelled = async {
            let status = cluster
                .backend
                .status_of(&id)
                .await
                .map_err(|err| cluster.explain(err))?;
            if let Some(err) = unknown_job(&cluster, &id, &reference, &status).await {
                return Err(err);
            }
            if status.state.is_terminal() {
                return Ok(format!(
                    "{reference} had already ended ({}); nothing to cancel",
                    describe::end(&status)
                ));
            }
            cluster
                .backend
                .cancel(&id)
                .await
                .map_err(|err| cluster.explain(err))?;
            Ok(format!("cancelled {reference}"))
        };
        match cancelled.await {
            Ok(said) => println!("{said}"),
            Err(err) => {
                worst = worst.max(err.exit as u8);
                terminal::print_error(&err);
            }
        }
    }
    Ok(worst)
}

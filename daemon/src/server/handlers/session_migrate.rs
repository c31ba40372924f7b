use super::super::Ctx;
use crate::Error;
use grove_proto::methods::{SessionMigrateParams, SessionMigrateResult};
use grove_state::Schema;

/// `session.migrate`: a session moves to a new schema in one checkpoint.
pub async fn handle(
    ctx: &Ctx,
    params: SessionMigrateParams,
) -> Result<SessionMigrateResult, Error> {
    let schema = match (&params.schema, &params.schema_text) {
        (Some(json), None) => {
            Schema::from_json(json).map_err(|e| Error::BadInput(e.to_string()))?
        }
        (None, Some(text)) => Schema::from_toml(&text.text, &text.origin)
            .map_err(|e| Error::BadInput(e.to_string()))?
            .ok_or_else(|| {
                Error::BadInput(format!(
                    "{}: no [state] table; the new schema goes there, as in .grove.toml",
                    text.origin
                ))
            })?,
        _ => {
            return Err(Error::BadInput(
                "give the new schema: `schema` or `schema_text`, one of them".into(),
            ))
        }
    };
    ctx.state
        .migrate(&params.name, schema, params.drop, params.rename)
        .await
}

use super::super::Ctx;
use crate::Error;
use grove_proto::methods::SessionCreateParams;
use grove_proto::state::SessionInfo;
use grove_state::Schema;

/// `session.create`: a new session with a schema (JSON form or TOML text).
pub async fn handle(ctx: &Ctx, params: SessionCreateParams) -> Result<SessionInfo, Error> {
    let schema = match (&params.schema, &params.schema_text) {
        (Some(_), Some(_)) => {
            return Err(Error::BadInput(
                "give `schema` or `schema_text`, not both".into(),
            ))
        }
        (Some(json), None) => {
            Some(Schema::from_json(json).map_err(|e| Error::BadInput(e.to_string()))?)
        }
        (None, Some(text)) => Schema::from_toml(&text.text, &text.origin)
            .map_err(|e| Error::BadInput(e.to_string()))?,
        (None, None) => None,
    };
    crate::sessions::validate_session_name(&params.name)?;
    if ctx.state.info(&params.name).await.is_ok() {
        return Err(Error::BadInput(format!(
            "session `{}` already exists",
            params.name
        )));
    }
    ctx.state.ensure(&params.name, schema, true).await?;
    ctx.state.info(&params.name).await
}

use super::super::Ctx;
use super::{Answer, Json};
use grove_proto::methods::{Hello, HelloResult};
use grove_proto::{codes, RpcError};
use serde_json::Value;

pub async fn handle(ctx: &Ctx, params: Option<Value>) -> Answer {
    let params = super::parse::<Hello>(params)?;
    let ours = ctx.config.protocol_version;
    if params.protocol != ours {
        let mut error = RpcError::new(
            codes::PROTOCOL_MISMATCH,
            format!(
                "the grove daemon speaks protocol {ours} but this client speaks {}; \
                 restart the daemon with the same grove version: `grove daemon stop`, \
                 then run your command again",
                params.protocol
            ),
        );
        error.data = Some(serde_json::json!({ "daemon_protocol": ours }));
        return Err(error);
    }
    let result = HelloResult {
        protocol: ours,
        daemon_version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
    };
    Json::of(&result)
}

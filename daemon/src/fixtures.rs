//! Small valid requests the daemon's unit tests share. A test changes the one field it is about
//! and keeps the rest, so what it checks is that field and not a sample of its own.

use kiln_proto::pb;
use kiln_proto::pb::triton_constexpr::Value;

/// A torch graph request with what validation requires and nothing more.
pub(crate) fn torch_graph_request() -> pb::TorchGraphRequest {
    pb::TorchGraphRequest { torch_version: "2.11.0".into(), payload: vec![1], ..Default::default() }
}

/// A Triton kernel with a pointer and a constexpr parameter, and four warps.
pub(crate) fn triton_source() -> pb::TritonSource {
    pb::TritonSource {
        source: "import triton".into(),
        kernel_name: "add".into(),
        signature: vec![
            pb::TritonArg { name: "x".into(), r#type: "*fp32".into() },
            pb::TritonArg { name: "BLOCK".into(), r#type: "constexpr".into() },
        ],
        constexprs: vec![pb::TritonConstexpr { name: "BLOCK".into(), value: Some(Value::IntValue(1024)) }],
        attributes: vec![],
        options: Some(pb::TritonOptions { num_warps: 4, ..Default::default() }),
        want_ptx: false,
    }
}

//! The protobuf codec of every generated client and server: tonic's own
//! encoder, and a decoder whose failures are `InvalidArgument` naming the
//! message, not tonic's `Internal`. Bytes that do not decode (invalid UTF-8
//! in a string field, a wrong wire type, random bytes) are the caller's
//! mistake, and the answer says which message and, where prost knows it,
//! which field (`NodeRegisterRequest.node: Node.id: invalid string value`).

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, ProstCodec};
use tonic::Status;

/// tonic's `ProstCodec` with [`ProtoDecoder`] for decoding; named by
/// `build.rs` as the codec of every service.
#[derive(Debug, Clone)]
pub struct ProtoCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ProtoCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for ProtoCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = ProtoDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProtoDecoder(PhantomData)
    }
}

/// Decodes `U`; a failure is `InvalidArgument` naming `U`.
#[derive(Debug, Clone, Default)]
pub struct ProtoDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for ProtoDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|e| decode_error::<U>(&e))
    }
}

/// The status of a `U` that did not decode.
pub fn decode_error<U>(e: &prost::DecodeError) -> Status {
    Status::invalid_argument(format!(
        "{}: the message does not decode as protobuf: {}",
        message_name::<U>(),
        e.to_string()
            .trim_start_matches("failed to decode Protobuf message: ")
    ))
}

/// `NodeRegisterRequest` for `stampede_proto::v1::NodeRegisterRequest`.
fn message_name<U>() -> &'static str {
    let full = std::any::type_name::<U>();
    full.rsplit("::").next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Node, NodeRegisterRequest};

    #[test]
    fn a_bad_string_names_the_message_and_the_field() {
        // NodeRegisterRequest.node (field 1) holding Node.id (field 1) = 0xff.
        let bytes = [0x0a, 0x03, 0x0a, 0x01, 0xff];
        let e = NodeRegisterRequest::decode(&bytes[..]).unwrap_err();
        let status = decode_error::<NodeRegisterRequest>(&e);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().starts_with("NodeRegisterRequest: ")
                && status.message().contains("Node.id"),
            "{}",
            status.message()
        );
        assert_eq!(message_name::<Node>(), "Node");
    }
}

//! Multipart upload: CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload,
//! ListParts and ListMultipartUploads. Not implemented yet: each answers `NotImplemented` (its state will live
//! under [`crate::MULTIPART_PREFIX`]).

use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CreateMultipartUploadInput, CreateMultipartUploadOutput,
    ListMultipartUploadsInput, ListMultipartUploadsOutput, ListPartsInput, ListPartsOutput,
    UploadPartInput, UploadPartOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::s3::SaltS3;

fn not_implemented<T>(op: &str) -> S3Result<T> {
    Err(s3_error!(NotImplemented, "{op} is not implemented yet"))
}

impl SaltS3 {
    pub(crate) async fn create_multipart_upload(
        &self,
        _req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        not_implemented("CreateMultipartUpload")
    }

    pub(crate) async fn upload_part(
        &self,
        _req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        not_implemented("UploadPart")
    }

    pub(crate) async fn complete_multipart_upload(
        &self,
        _req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        not_implemented("CompleteMultipartUpload")
    }

    pub(crate) async fn abort_multipart_upload(
        &self,
        _req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        not_implemented("AbortMultipartUpload")
    }

    pub(crate) async fn list_parts(
        &self,
        _req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        not_implemented("ListParts")
    }

    pub(crate) async fn list_multipart_uploads(
        &self,
        _req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        not_implemented("ListMultipartUploads")
    }
}

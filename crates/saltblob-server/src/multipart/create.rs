//! CreateMultipartUpload: the upload record, with the object's attributes to be, its checksum choice and its
//! encryption, once the bucket's cap on uploads in progress admits it.

use s3s::dto::{CreateMultipartUploadInput, CreateMultipartUploadOutput};
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::checksum::UploadChecksum;
use super::{now, upload};
use crate::attrs::object_metadata;
use crate::keys::object_key;
use crate::service::SaltS3;

/// CreateMultipartUpload: writes an open upload record with the object's attributes to be and its checksum
/// choice, and its listing index entry.
pub(crate) async fn handle_create_multipart_upload(
    s3: &SaltS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    object_key(&input.bucket, &input.key)?;
    let longest = upload::max_key_len(&input.bucket);
    if input.key.len() > longest {
        return Err(s3_error!(
            KeyTooLongError,
            "Your key is too long: {} bytes; the keys of multipart uploads in bucket {} are at most {longest} bytes",
            input.key.len(),
            input.bucket
        ));
    }
    let checksum = UploadChecksum::from_create(
        input.checksum_algorithm.as_ref(),
        input.checksum_type.as_ref(),
    )?;
    let sse = s3
        .sse
        .upload(&s3.store, &input.bucket, &record, &req.headers)
        .await?;
    s3.uploads.admit(&s3.store, &input.bucket).await?;
    let mut metadata = object_metadata!(input)?;
    sse.record_in_upload(&s3.store, &mut metadata).await?;
    let id = upload::create(
        &s3.store,
        &input.bucket,
        &input.key,
        metadata,
        input.content_type,
        checksum,
        now(&s3.store),
    )
    .await?;
    let output = CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        checksum_algorithm: checksum.map(UploadChecksum::algorithm_dto),
        checksum_type: checksum.map(UploadChecksum::kind_dto),
        ..CreateMultipartUploadOutput::default()
    };
    Ok(sse.echo.respond(output))
}

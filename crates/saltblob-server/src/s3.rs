//! The S3 operations: [`SaltS3`] implements `s3s::S3`. Bucket operations are here; object operations are in
//! `object.rs`, listings in `list.rs`, multipart upload in `multipart.rs`. Every other S3 operation answers
//! `NotImplemented` (s3s's default).

use s3s::dto::{
    Bucket, CreateBucketInput, CreateBucketOutput, DeleteBucketInput, DeleteBucketOutput,
    HeadBucketInput, HeadBucketOutput, ListBucketsInput, ListBucketsOutput,
};
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{BlobStore, Error, Manifest, PutCondition, PutOptions};

use crate::error::{from_store, no_such_bucket};
use crate::keys::{BUCKET_PREFIX, MULTIPART_PREFIX, bucket_key, objects_prefix};
use crate::object::last_modified_of;

/// Buckets read per page of ListBuckets' walk.
const BUCKET_PAGE: usize = 1000;

/// The S3 service on one store.
pub(crate) struct SaltS3 {
    pub(crate) store: BlobStore,
    pub(crate) region: String,
}

impl SaltS3 {
    /// The record of `bucket`.
    ///
    /// # Errors
    /// `NoSuchBucket` when it does not exist.
    pub(crate) async fn require_bucket(&self, bucket: &str) -> S3Result<Manifest> {
        match self.store.head(bucket_key(bucket)).await {
            Ok(m) => Ok(m),
            Err(Error::NotFound { .. }) => Err(no_such_bucket(bucket)),
            Err(e) => Err(from_store(e)),
        }
    }

    /// Whether anything is stored under `prefix`.
    async fn holds_any(&self, prefix: &str) -> S3Result<bool> {
        let page = self
            .store
            .list_page(prefix.as_bytes(), None, 1)
            .await
            .map_err(from_store)?;
        Ok(!page.is_empty())
    }
}

#[async_trait::async_trait]
impl S3 for SaltS3 {
    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let mut buckets = Vec::new();
        let mut after: Option<bytes::Bytes> = None;
        loop {
            let page = self
                .store
                .list_page(BUCKET_PREFIX.as_bytes(), after.as_deref(), BUCKET_PAGE)
                .await
                .map_err(from_store)?;
            let Some(last) = page.last() else { break };
            after = Some(last.key.clone());
            for entry in page {
                let name = entry.key.get(BUCKET_PREFIX.len()..).unwrap_or_default();
                let (Ok(name), Ok(manifest)) = (std::str::from_utf8(name), entry.manifest) else {
                    continue;
                };
                buckets.push(Bucket {
                    name: Some(name.to_owned()),
                    creation_date: Some(last_modified_of(&manifest)),
                    bucket_region: Some(self.region.clone()),
                });
            }
        }
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..ListBucketsOutput::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let bucket = req.input.bucket;
        let opts = PutOptions::new()
            .with_condition(PutCondition::IfAbsent)
            .with_content_type("application/x-saltblob-bucket");
        let created = saltblob_core::version::now_micros().to_string();
        match self.store.put(bucket_key(&bucket), created, &opts).await {
            Ok(_) => Ok(S3Response::new(CreateBucketOutput {
                location: Some(format!("/{bucket}")),
            })),
            Err(Error::AlreadyExists { .. }) => Err(s3_error!(
                BucketAlreadyOwnedByYou,
                "Your previous request to create the named bucket succeeded and you already own it."
            )),
            Err(e) => Err(from_store(e)),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.require_bucket(&req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..HeadBucketOutput::default()
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket;
        self.require_bucket(&bucket).await?;
        let uploads = format!("{MULTIPART_PREFIX}{bucket}/");
        if self.holds_any(&objects_prefix(&bucket)).await? || self.holds_any(&uploads).await? {
            return Err(s3_error!(
                BucketNotEmpty,
                "The bucket you tried to delete is not empty"
            ));
        }
        self.store
            .delete(bucket_key(&bucket))
            .await
            .map_err(from_store)?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<s3s::dto::PutObjectInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectOutput>> {
        SaltS3::put_object(self, req).await
    }

    async fn get_object(
        &self,
        req: S3Request<s3s::dto::GetObjectInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectOutput>> {
        SaltS3::get_object(self, req).await
    }

    async fn head_object(
        &self,
        req: S3Request<s3s::dto::HeadObjectInput>,
    ) -> S3Result<S3Response<s3s::dto::HeadObjectOutput>> {
        SaltS3::head_object(self, req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<s3s::dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteObjectOutput>> {
        SaltS3::delete_object(self, req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<s3s::dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteObjectsOutput>> {
        SaltS3::delete_objects(self, req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<s3s::dto::CopyObjectInput>,
    ) -> S3Result<S3Response<s3s::dto::CopyObjectOutput>> {
        SaltS3::copy_object(self, req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<s3s::dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<s3s::dto::ListObjectsV2Output>> {
        SaltS3::list_objects_v2(self, req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<s3s::dto::ListObjectsInput>,
    ) -> S3Result<S3Response<s3s::dto::ListObjectsOutput>> {
        SaltS3::list_objects(self, req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<s3s::dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<s3s::dto::CreateMultipartUploadOutput>> {
        SaltS3::create_multipart_upload(self, req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<s3s::dto::UploadPartInput>,
    ) -> S3Result<S3Response<s3s::dto::UploadPartOutput>> {
        SaltS3::upload_part(self, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<s3s::dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<s3s::dto::CompleteMultipartUploadOutput>> {
        SaltS3::complete_multipart_upload(self, req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<s3s::dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<s3s::dto::AbortMultipartUploadOutput>> {
        SaltS3::abort_multipart_upload(self, req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<s3s::dto::ListPartsInput>,
    ) -> S3Result<S3Response<s3s::dto::ListPartsOutput>> {
        SaltS3::list_parts(self, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<s3s::dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<s3s::dto::ListMultipartUploadsOutput>> {
        SaltS3::list_multipart_uploads(self, req).await
    }
}

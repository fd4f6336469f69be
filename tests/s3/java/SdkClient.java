// The AWS SDK for Java v2 against `saltblob serve`, run by tests/s3/test_java_sdk.py with Java's source launcher
// (`java -cp 'LIB/*' SdkClient.java ...`; the jars are those of pom.xml, fetched by scripts/s3-clients.sh).
//
// Over plain HTTP the SDK signs every PutObject and UploadPart body in aws-chunked form, 128 KiB a chunk, each
// chunk with its own signature: `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` when it sends no checksum
// (requestChecksumCalculation WHEN_REQUIRED), `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER` with a signed CRC32
// trailer by default (WHEN_SUPPORTED). boto3 and awscli never send these. The program does the same uploads in
// both modes, reads everything back with the SDK's response checksum validation (its default), and lists.
//
//   java -cp 'LIB/*' SdkClient.java ENDPOINT BUCKET INPUT_DIR OUTPUT_DIR
//
// Credentials come from SALTBLOB_TEST_ACCESS_KEY and SALTBLOB_TEST_SECRET_KEY. INPUT_DIR holds `single/NAME`
// files (each put as one PutObject under MODE/NAME) and `parts/NAME` files (in name order, the parts of one
// multipart upload MODE/multipart), MODE being `signed` or `trailer`. Every object is downloaded to
// OUTPUT_DIR/KEY. Standard output has one tab-separated line per request the test checks:
//   PutObject KEY REQUEST_ID | UploadPart KEY PART_NUMBER REQUEST_ID | CompleteMultipartUpload KEY ETAG
//   Object KEY SIZE ETAG (the listing of the bucket, two keys a page) | Prefix PREFIX (delimiter "/")
// Any failure is an exception: the exit code is not 0 and stderr says why.

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.awscore.retry.AwsRetryStrategy;
import software.amazon.awssdk.core.checksums.RequestChecksumCalculation;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.core.sync.ResponseTransformer;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.CommonPrefix;
import software.amazon.awssdk.services.s3.model.CompletedPart;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Response;
import software.amazon.awssdk.services.s3.model.S3Object;
import software.amazon.awssdk.services.s3.model.UploadPartResponse;

public final class SdkClient {
    private SdkClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            throw new IllegalArgumentException("usage: SdkClient ENDPOINT BUCKET INPUT_DIR OUTPUT_DIR");
        }
        URI endpoint = URI.create(args[0]);
        String bucket = args[1];
        Path input = Path.of(args[2]);
        Path output = Path.of(args[3]);
        List<Path> singles = sorted(input.resolve("single"));
        List<Path> parts = sorted(input.resolve("parts"));
        List<String> keys = new ArrayList<>();

        try (S3Client signed = client(endpoint, RequestChecksumCalculation.WHEN_REQUIRED);
                S3Client trailer = client(endpoint, RequestChecksumCalculation.WHEN_SUPPORTED)) {
            upload(signed, "signed", bucket, singles, parts, keys);
            upload(trailer, "trailer", bucket, singles, parts, keys);
            // Reads with the default client: response checksums are validated where the server returns them.
            for (String key : keys) {
                Path to = output.resolve(key);
                Files.createDirectories(to.getParent());
                trailer.getObject(b -> b.bucket(bucket).key(key), ResponseTransformer.toFile(to));
            }
            ListObjectsV2Request all = ListObjectsV2Request.builder().bucket(bucket).maxKeys(2).build();
            for (ListObjectsV2Response page : trailer.listObjectsV2Paginator(all)) {
                for (S3Object o : page.contents()) {
                    System.out.println("Object\t" + o.key() + "\t" + o.size() + "\t" + o.eTag());
                }
            }
            ListObjectsV2Request top = ListObjectsV2Request.builder().bucket(bucket).delimiter("/").build();
            for (CommonPrefix p : trailer.listObjectsV2(top).commonPrefixes()) {
                System.out.println("Prefix\t" + p.prefix());
            }
        }
    }

    /** A client for ENDPOINT: path-style requests, region us-east-1, no retries (a failure shows as it is). */
    private static S3Client client(URI endpoint, RequestChecksumCalculation checksums) {
        AwsBasicCredentials credentials = AwsBasicCredentials.create(
                System.getenv("SALTBLOB_TEST_ACCESS_KEY"), System.getenv("SALTBLOB_TEST_SECRET_KEY"));
        return S3Client.builder()
                .endpointOverride(endpoint)
                .forcePathStyle(true)
                .region(Region.US_EAST_1)
                .credentialsProvider(StaticCredentialsProvider.create(credentials))
                .requestChecksumCalculation(checksums)
                .overrideConfiguration(o -> o.retryStrategy(AwsRetryStrategy.doNotRetry()))
                .build();
    }

    /** Puts each of SINGLES under MODE/NAME and PARTS as the multipart upload MODE/multipart; adds the keys. */
    private static void upload(S3Client s3, String mode, String bucket, List<Path> singles, List<Path> parts,
            List<String> keys) {
        for (Path file : singles) {
            String key = mode + "/" + file.getFileName();
            String id = s3.putObject(b -> b.bucket(bucket).key(key), RequestBody.fromFile(file))
                    .responseMetadata().requestId();
            System.out.println("PutObject\t" + key + "\t" + id);
            keys.add(key);
        }
        String key = mode + "/multipart";
        String upload = s3.createMultipartUpload(b -> b.bucket(bucket).key(key)).uploadId();
        List<CompletedPart> done = new ArrayList<>();
        for (int i = 0; i < parts.size(); i++) {
            int number = i + 1;
            UploadPartResponse part = s3.uploadPart(
                    b -> b.bucket(bucket).key(key).uploadId(upload).partNumber(number),
                    RequestBody.fromFile(parts.get(i)));
            System.out.println("UploadPart\t" + key + "\t" + number + "\t" + part.responseMetadata().requestId());
            done.add(CompletedPart.builder().partNumber(number).eTag(part.eTag())
                    .checksumCRC32(part.checksumCRC32()).build());
        }
        String etag = s3.completeMultipartUpload(
                b -> b.bucket(bucket).key(key).uploadId(upload).multipartUpload(m -> m.parts(done))).eTag();
        System.out.println("CompleteMultipartUpload\t" + key + "\t" + etag);
        keys.add(key);
    }

    private static List<Path> sorted(Path dir) throws Exception {
        try (Stream<Path> files = Files.list(dir)) {
            return files.sorted().toList();
        }
    }
}

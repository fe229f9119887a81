//! Redaction corpus: every planted secret (fake, realistic-looking, one or more per format) is
//! replaced by its typed placeholder, and ordinary commands with look-alikes come back unchanged.

use cmdgate_daemon::engine::export::{redact, redact_argv, SecretKind};
use SecretKind::*;

/// `(kind, text with the secret, the secret)`: the secret must vanish and `<REDACTED:kind>` appear.
const PLANTED: &[(SecretKind, &str, &str)] = &[
    (VendorToken, "curl https://api.perplexity.ai/chat/completions -d @q.json # 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", "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"),
    (AwsAccessKey, "aws configure set aws_access_key_id AKIAZ7QX4M2B8KT5LW3N", "AKIAZ7QX4M2B8KT5LW3N"),
    (AwsAccessKey, "export AWS_ACCESS_KEY_ID=ASIAQW3RT7YU2IO9PL4K", "ASIAQW3RT7YU2IO9PL4K"),
    (AwsSecretKey, "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8kLm3Np2", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8kLm3Np2"),
    (AwsSecretKey, "aws_secret_access_key = Hk9sP2qLm4Rt7Vw1Xz3Bc5Nd8Fg0Jh6Kl2Mn4Pq7", "Hk9sP2qLm4Rt7Vw1Xz3Bc5Nd8Fg0Jh6Kl2Mn4Pq7"),
    (GithubToken, "git clone https://x:@github.com/o/r && gh auth login --with-token <<< ghp_R8fK2mQ9xL4vT7nB3wZ6pY1sD5hJ0cA2eG4i", "ghp_R8fK2mQ9xL4vT7nB3wZ6pY1sD5hJ0cA2eG4i"),
    (GithubToken, "curl -s https://api.github.com/user -H 'X-Token: gho_2Nq7Wm4Xk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7'", "gho_2Nq7Wm4Xk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7"),
    (GithubToken, "echo ghs_Tz4Xq8Wn2Lm6Rp9Vk3Bc7Yd1Fh5Jg0Ks2Mu4 | docker login ghcr.io -u bot --password-stdin", "ghs_Tz4Xq8Wn2Lm6Rp9Vk3Bc7Yd1Fh5Jg0Ks2Mu4"),
    (GithubToken, "gh api user --token github_pat_11ABCDEFG0aB3cD5eF7gH9_iJ1kL3mN5oP7qR9sT1uV3wX5yZ7aB9cD1eF3gH5iJ7kL9mN1oP3qR5sT7uV9wX1", "github_pat_11ABCDEFG0aB3cD5eF7gH9_iJ1kL3mN5oP7qR9sT1uV3wX5yZ7aB9cD1eF3gH5iJ7kL9mN1oP3qR5sT7uV9wX1"),
    (GitlabToken, "git push https://gitlab.com/g/p.git -o ci.skip # glpat-Xy7Kq2Wm9Np4Lr6Ts8Vb", "glpat-Xy7Kq2Wm9Np4Lr6Ts8Vb"),
    (SlackToken, "curl -d token=xoxb-2048163795-4096327590-Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd https://slack.com/api/chat.postMessage", "xoxb-2048163795-4096327590-Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd"),
    (SlackToken, "SLACK=xoxp-1234567890-0987654321-1122334455-6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c", "xoxp-1234567890-0987654321-1122334455-6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c"),
    (SlackWebhook, "curl -X POST https://hooks.slack.com/services/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 -d '{}'", "T024BE7LD/B01ABCD2EFG/Xk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2"),
    (DiscordWebhook, "curl -H 'Content-Type: application/json' https://discord.com/api/webhooks/1187654321098765432/Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7Pq", "1187654321098765432/Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7Pq"),
    (StripeKey, "curl https://api.stripe.com/v1/charges -u sk_live_51HqT2kLm9Np4Rx7Vb3Yc8Zd1Fh6Jg0Ks2Mu5Pq:", "sk_live_51HqT2kLm9Np4Rx7Vb3Yc8Zd1Fh6Jg0Ks2Mu5Pq"),
    (StripeKey, "stripe listen --forward-to localhost:4242 # whsec_Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0Ks", "whsec_Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0Ks"),
    (OpenaiKey, "OPENAI=sk-proj-Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc python app.py", "sk-proj-Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc"),
    (AnthropicKey, "curl https://api.anthropic.com/v1/messages -H \"x-api-key: $KEY\" # sk-ant-api03-Xk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc-Wn2", "sk-ant-api03-Xk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc-Wn2"),
    (GoogleApiKey, "curl 'https://maps.googleapis.com/maps/api/geocode/json?address=x&key=AIzaSyD4Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0K'", "AIzaSyD4Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0K"),
    (GoogleOauthSecret, "gcloud auth --client-id=123.apps.googleusercontent.com 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", "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"),
    (GoogleOauthToken, "curl -H \"X-Goog: ya29.a0AfB_byC7Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0Ks\" https://www.googleapis.com/drive/v3/files", "ya29.a0AfB_byC7Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0Ks"),
    (GcpPrivateKey, r#"echo '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n", "client_email": "a@b.iam.gserviceaccount.com"}' > sa.json"#, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    (Jwt, "curl -b session=x https://app/api?jwt=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.Sfl8Kq2Wm9Xn4Lp7Rt3Vb6Yc1Zd", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.Sfl8Kq2Wm9Xn4Lp7Rt3Vb6Yc1Zd"),
    (PrivateKey, "cat > ~/.ssh/id_ed25519 <<'EOF'\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBkZXZlbG9wbWVudCBrZXkgbm90IGEgc2VjcmV0IGF0IGFsbA==\n-----END OPENSSH PRIVATE KEY-----\nEOF", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"),
    (PrivateKey, "printf '%s' '-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0Ks' | openssl rsa -check", "MIIEowIBAAKCAQEA7Kq8Wm3Xn7Lp2Rt5Vb9Yc4Zd6Fh1Jg0Ks"),
    (UrlPassword, "psql postgres://app:Tr0ub4dor&3x@db.internal:5432/prod -c 'select 1'", "Tr0ub4dor&3x"),
    (UrlPassword, "git remote add origin https://deploy:s3cr3t-Pa55w0rd@git.example.com/team/repo.git", "s3cr3t-Pa55w0rd"),
    (UrlPassword, "redis-cli -u redis://default:hunter2hunter2@cache:6379/0 ping", "hunter2hunter2"),
    (AuthHeader, "curl -H 'Authorization: token 9f8e7d6c5b4a39281706f5e4d3c2b1a0' https://api.example.com", "token 9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    (AuthHeader, "curl --header \"Private-Token: Xk9Lp3Rt6Vb8Yc1Zd5Fh\" https://gitlab.example.com/api/v4/projects", "Xk9Lp3Rt6Vb8Yc1Zd5Fh"),
    (AuthHeader, "http GET api.example.com/me 'X-Api-Key:Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd'", "Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd"),
    (BearerToken, "wget --header=Bearer\\ x https://a; echo Bearer Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2 | tee log", "Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2"),
    (BasicCredentials, "curl -u admin:Sup3rS3cret! https://jenkins.example.com/api/json", "Sup3rS3cret!"),
    (BasicCredentials, "echo 'auth=Basic YWRtaW46cGFzc3dvcmQxMjM=' >> req.txt", "YWRtaW46cGFzc3dvcmQxMjM="),
    (PasswordFlag, "mongosh --username root --password 'Xk9#Lp3Rt6' mongodb://db:27017", "Xk9#Lp3Rt6"),
    (PasswordFlag, "vault login -method=userpass username=ops password=CorrectHorse9 && rabbitmqctl add_user u --password=B4tt3ryStaple", "B4tt3ryStaple"),
    (PasswordFlag, "sshpass -p 'Wint3r2024!' ssh deploy@10.0.0.5 uptime", "Wint3r2024!"),
    (PasswordFlag, "docker login registry.example.com -u ci -p Xk9Lp3Rt6Vb8", "Xk9Lp3Rt6Vb8"),
    (MysqlPassword, "mysql -u root -pS3cretPass! -h 127.0.0.1 app < dump.sql", "S3cretPass!"),
    (MysqlPassword, "MYSQL_PWD=Qm7Xk2Wn9 mysqldump -u backup shop > shop.sql", "Qm7Xk2Wn9"),
    (PgPassword, "PGPASSWORD=pg-Xk9Lp3Rt6 psql -h db -U app -c 'vacuum'", "pg-Xk9Lp3Rt6"),
    (PasswordAssignment, "export DB_PASSWORD=\"correct horse battery staple\" && ./migrate", "correct horse battery staple"),
    (TokenAssignment, "CI_JOB_TOKEN=Xk9Lp3Rt6Vb8Yc1Z make publish", "Xk9Lp3Rt6Vb8Yc1Z"),
    (SecretAssignment, "JWT_SECRET='k8s-signing-Qm7Xk2Wn' node server.js", "k8s-signing-Qm7Xk2Wn"),
    (ApiKeyAssignment, "export MAPBOX_API_KEY=pk9Lp3Rt6Vb8Yc1Zd5", "pk9Lp3Rt6Vb8Yc1Zd5"),
    (NpmToken, "npm config set //registry.npmjs.org/:_authToken=npm_Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7", "npm_Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7"),
    (NpmToken, "echo '//npm.pkg.github.com/:_authToken=Xk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2' > .npmrc", "Xk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2"),
    (HerokuKey, "HEROKU_API_KEY=4c2e9a1b-7d3f-4e8a-9b6c-1f0e2d3c4b5a heroku apps", "4c2e9a1b-7d3f-4e8a-9b6c-1f0e2d3c4b5a"),
    (HerokuKey, "heroku config --app x # HRKU-AAQm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7", "HRKU-AAQm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7"),
    (TwilioKey, "twilio api:core:messages:create --api-key SK2b7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c", "SK2b7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c"),
    (TwilioKey, "TWILIO_AUTH_TOKEN=9c1a8f3e6b0d5c2a9f7e4b1d8c2b7e4d ./sms.sh", "9c1a8f3e6b0d5c2a9f7e4b1d8c2b7e4d"),
    (SendgridKey, "curl --request POST https://api.sendgrid.com/v3/mail/send -d @m.json # SG.Qm7Xk2Wn9Lp4Rt6Vb8Yc1Z.d5Fh0Jg2Ks4Mu7PqA3Bc9Xk2Wn4Lp7Rt1Vb3Yc6Zd8Fh0", "SG.Qm7Xk2Wn9Lp4Rt6Vb8Yc1Z.d5Fh0Jg2Ks4Mu7PqA3Bc9Xk2Wn4Lp7Rt1Vb3Yc6Zd8Fh0"),
    (AzureKey, "az storage blob list --connection-string 'DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc+Xk2/Wn4Lp==;EndpointSuffix=core.windows.net'", "Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc+Xk2/Wn4Lp=="),
    (AzureSas, "azcopy copy f.txt 'https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&se=2030-01-01&sp=rw&sig=Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2%2BKs4Mu7%3D'", "Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2%2BKs4Mu7%3D"),
    (DockerAuth, r#"echo '{"auths":{"registry.example.com":{"auth":"Y2k6WGs5THAzUnQ2VmI4WWMx"}}}' > ~/.docker/config.json"#, "Y2k6WGs5THAzUnQ2VmI4WWMx"),
    (VaultToken, "VAULT_ADDR=https://vault:8200 vault kv get -address=x secret/app # hvs.CAESIQm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4", "hvs.CAESIQm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4"),
    (DatabricksToken, "databricks fs ls dbfs:/ --profile x # dapi7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b", "dapi7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b"),
    (DigitaloceanToken, "doctl auth init -t dop_v1_7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b", "dop_v1_7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b"),
    (ShopifyToken, "curl -H 'X-Shopify-Access: 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' https://shop.myshopify.com/admin/api/2024-01/shop.json", "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"),
    (PypiToken, "twine upload -u __token__ dist/* # pypi-AgEIcHlwaS5vcmcCJDdlNGQ5YzFhLThmM2UtNmIwZC01YzJhLTlmN2U0YjFkOGMyYg", "pypi-AgEIcHlwaS5vcmcCJDdlNGQ5YzFhLThmM2UtNmIwZC01YzJhLTlmN2U0YjFkOGMyYg"),
    (MailgunKey, "curl -s --user api:key-3ax6xnjp29jd6fds4gc373sgvjxteol0 https://api.mailgun.net/v3/x/messages", "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"),
    (TelegramBotToken, "curl https://api.telegram.org/bot5123456789:AAHk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA/getMe", "5123456789:AAHk9Lp3Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA"),
    (AtlassianToken, "curl -u me@example.com:ATATT3xFfGF0Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc9Xk2Wn4Lp7Rt1Vb3Yc6=A1B2C3D4 https://x.atlassian.net", "ATATT3xFfGF0Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3Bc9Xk2Wn4Lp7Rt1Vb3Yc6=A1B2C3D4"),
    (LinearKey, "curl -H 'Content-Type: application/json' -d @q.json https://api.linear.app/graphql # lin_api_Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3", "lin_api_Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks4Mu7PqA3"),
    (HuggingfaceToken, "huggingface-cli login --add-to-git-credential 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", "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"),
    (PostmanKey, "newman run c.json --env-var key=x # PMAK-65a1b2c3d4e5f6a7b8c9d0e1-7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b7e", "PMAK-65a1b2c3d4e5f6a7b8c9d0e1-7e4d9c1a8f3e6b0d5c2a9f7e4b1d8c2b7e"),
    (AgeSecretKey, "echo AGE-SECRET-KEY-1QM7XK2WN9LP4RT6VB8YC1ZD5FH0JG2KS4MU7PQA3BC9XK2WN4LP7RT1VB3 > key.txt", "AGE-SECRET-KEY-1QM7XK2WN9LP4RT6VB8YC1ZD5FH0JG2KS4MU7PQA3BC9XK2WN4LP7RT1VB3"),
    (GrafanaToken, "grafana-cli --config x plugins ls # glsa_Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks_4Mu7PqA3", "glsa_Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2Ks_4Mu7PqA3"),
    (HighEntropy, "export SIGNING_SALT=Zq8Xw3Kp7Lm2Nr5Tv9Bc4Yd6Fh1Jg0Ks2Mu4Pa8Wq", "Zq8Xw3Kp7Lm2Nr5Tv9Bc4Yd6Fh1Jg0Ks2Mu4Pa8Wq"),
];

/// Ordinary commands, including look-alikes of secrets: unchanged by redaction.
const ORDINARY: &[&str] = &[
    "git status",
    "git log --oneline -n 20",
    "git show 3f2c9a1b7d4e8f0a6c5b2d9e1f3a7c8b4d6e0f2a",
    "git checkout -b feature/sk-learn-pipeline",
    "git diff HEAD~3..HEAD -- src/",
    "cargo test -p cmdgate-policy -- --nocapture",
    "cargo build --release --target x86_64-unknown-linux-gnu",
    "docker run --rm -v $PWD:/src -w /src rust:1.85 cargo build",
    "docker inspect 4f1c2a9e7b3d5c8a6e0f2b4d7a9c1e3f5b8d0a2c4e6f8b1d3a5c7e9f0b2d4a6c",
    "kubectl get pods -n kube-system -o wide",
    "kubectl logs deploy/api --since=1h | grep 550e8400-e29b-41d4-a716-446655440000",
    "echo aGVsbG8gd29ybGQsIHRoaXMgaXMgbm90IGEgc2VjcmV0IGF0IGFsbA== | base64 -d",
    "DATA=VGhpcyBpcyBqdXN0IGEgcGxhaW4gc2VudGVuY2UgZW5jb2RlZCBpbiBiYXNlNjQ= ./decode.sh",
    "mysql --password-file=/run/secrets/db -u app shop",
    "pg_dump --password -h db -U app shop > shop.sql",
    "psql -W -h localhost -U postgres",
    "docker login --password-stdin -u ci registry.example.com < token.txt",
    "export TOKEN_FILE=/run/secrets/token",
    "export GITHUB_TOKEN=$(cat ~/.config/gh/token)",
    "export API_KEY=\"$API_KEY_FROM_VAULT\"",
    "TOKENIZERS_PARALLELISM=false python train.py --max_tokens=4096",
    "npm install --save-dev typescript@5.4.2",
    "npm run build -- --mode production",
    "python -m pip install -r requirements.txt",
    "curl -fsSL https://sh.rustup.rs -o rustup.sh",
    "curl -H 'Accept: application/json' https://api.example.com/health",
    "curl -u admin https://jenkins.example.com/api/json",
    "ssh -i ~/.ssh/id_ed25519 deploy@10.0.0.5 'systemctl status api'",
    "openssl genpkey -algorithm ed25519 -out key.pem",
    "grep -rn 'BEGIN CERTIFICATE' /etc/ssl/certs | head",
    "sha256sum target/release/cmdgate-hook",
    "ls -la ~/.aws && cat ~/.aws/config",
    "terraform plan -var-file=prod.tfvars -out=plan.bin",
    "aws s3 ls s3://my-bucket/logs/2024/ --recursive",
    "go test ./... -run TestSplit -count=1",
    "make -j8 CFLAGS=-O2",
    "find . -name '*.rs' -newer Cargo.lock -print",
    "sed -i 's/password/passphrase/g' docs/guide.md",
    "echo 'Basic usage: cmdgate export --out data.jsonl'",
    "echo the bearer of this letter",
    "rg -n 'Authorization' src/",
    "git config user.email dev@example.com",
    "uuidgen && date -u +%Y-%m-%dT%H:%M:%SZ",
    "echo 0x7fffffffffffffff && printf '%x' 255",
    "cat keys.txt | awk -F: '{print $1}'",
    "export PATH=$HOME/.cargo/bin:$PATH",
    "ssh-keygen -t ed25519 -f ~/.ssh/id_ed25519 -N ''",
    "helm upgrade --install api ./chart --set image.tag=1.4.2",
    "cat config.yaml | yq '.database.password_file'",
    "key=$(openssl rand -hex 16)",
    "for t in task-1 task-2; do echo $t; done",
];

#[test]
fn every_planted_secret_is_replaced_by_its_kind() {
    let mut kinds = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for (kind, text, secret) in PLANTED {
        let (out, found) = redact(text);
        let placeholder = format!("<REDACTED:{}>", kind.as_str());
        if out.contains(secret) || !out.contains(&placeholder) {
            failures.push(format!("{kind:?}: {out:?} {found:?}"));
        }
        kinds.insert(*kind);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(kinds.len() >= 30, "only {} formats planted", kinds.len());
    assert_eq!(
        kinds.len(),
        SecretKind::ALL.len(),
        "every kind has a planted case"
    );
}

#[test]
fn ordinary_commands_and_look_alikes_are_left_alone() {
    let changed: Vec<String> = ORDINARY
        .iter()
        .filter_map(|text| {
            let (out, found) = redact(text);
            (&out != text).then(|| format!("{out:?} {found:?}"))
        })
        .collect();
    assert!(changed.is_empty(), "{}", changed.join("\n"));
}

#[test]
fn redaction_is_idempotent() {
    for (_, text, _) in PLANTED {
        let (once, _) = redact(text);
        let (twice, again) = redact(&once);
        assert_eq!(once, twice, "second pass found {again:?}");
    }
}

#[test]
fn offsets_point_at_the_secret() {
    for (kind, text, secret) in PLANTED {
        let (_, found) = redact(text);
        let hit = found.iter().find(|r| r.kind == *kind).unwrap();
        assert!(
            text[hit.start..hit.end].contains(secret) || secret.contains(&text[hit.start..hit.end]),
            "{kind:?}: span {:?} of {text:?}",
            &text[hit.start..hit.end]
        );
    }
}

#[test]
fn argv_words_are_redacted_with_their_neighbours_as_context() {
    let argv: Vec<String> = ["mysql", "-u", "root", "-pS3cretPass!", "shop"]
        .map(String::from)
        .to_vec();
    let (words, kinds) = redact_argv(&argv);
    assert_eq!(
        words,
        ["mysql", "-u", "root", "-p<REDACTED:mysql_password>", "shop"]
    );
    assert_eq!(kinds, [MysqlPassword]);

    let argv: Vec<String> = [
        "curl",
        "-H",
        "Authorization: Bearer Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg2",
        "https://api.example.com/v1",
    ]
    .map(String::from)
    .to_vec();
    let (words, _) = redact_argv(&argv);
    assert_eq!(words[2], "Authorization: <REDACTED:auth_header>");
    assert_eq!(
        words[3], "https://api.example.com/v1",
        "the next word is kept"
    );

    let argv: Vec<String> = ["sshpass", "-p", "Wint3r2024!", "ssh", "host"]
        .map(String::from)
        .to_vec();
    assert_eq!(redact_argv(&argv).0[2], "<REDACTED:password_flag>");

    let plain: Vec<String> = ["git", "commit", "-m", "fix: the password prompt"]
        .map(String::from)
        .to_vec();
    assert_eq!(redact_argv(&plain).0, plain);
}

/// A deterministic token body of `n` bytes from `alphabet` (fake; it only has the format's shape).
fn body(alphabet: &str, n: usize) -> String {
    let a = alphabet.as_bytes();
    (0..n)
        .map(|i| a[(i * 7 + i / a.len()) % a.len()] as char)
        .collect()
}

const ALNUM: &str = "Qm7Xk2Wn9Lp4Rt6Vb8Yc1Zd5Fh0Jg3Ks";
const UPPER: &str = "QM7XK2WN9LP4RT6VB8YC1ZD5FH0JG3KS";
const LOWER: &str = "qm7xk2wn9lp4rt6vb8yc1zd5fh0jg3ks";
const HEX: &str = "0a1b2c3d4e5f6789";

/// Gitleaks' default rules (gitleaks/gitleaks, `config/gitleaks.toml`, the rules generated from
/// `cmd/generate/config/rules/`) whose token has a distinctive literal prefix, each with a token
/// of that rule's shape: `(gitleaks rule id, kind, token)`. Contextual rules (a vendor's name then
/// `=`/`:`) are the assignment matchers' and are not repeated here.
fn gitleaks_prefixed() -> Vec<(&'static str, SecretKind, String)> {
    vec![
        (
            "aws-access-token (A3T)",
            AwsAccessKey,
            format!("A3TA{}", body("QWERTYUIOPASDFGH234567", 16)),
        ),
        (
            "1password-service-account-token",
            VendorToken,
            format!("ops_eyJ{}", body(ALNUM, 250)),
        ),
        (
            "adobe-client-secret",
            VendorToken,
            format!("p8e-{}", body(ALNUM, 32)),
        ),
        (
            "alibaba-access-key-id",
            VendorToken,
            format!("LTAI{}", body(ALNUM, 20)),
        ),
        (
            "artifactory-api-key",
            VendorToken,
            format!("AKCp{}", body(ALNUM, 69)),
        ),
        (
            "clojars-api-token",
            VendorToken,
            format!("CLOJARS_{}", body(ALNUM, 60)),
        ),
        (
            "doppler-api-token",
            VendorToken,
            format!("dp.pt.{}", body(ALNUM, 43)),
        ),
        (
            "duffel-api-token",
            VendorToken,
            format!("duffel_test_{}", body(ALNUM, 43)),
        ),
        (
            "dynatrace-api-token",
            VendorToken,
            format!("dt0c01.{}.{}", body(UPPER, 24), body(ALNUM, 64)),
        ),
        (
            "easypost-api-token",
            VendorToken,
            format!("EZAK{}", body(ALNUM, 54)),
        ),
        (
            "easypost-test-api-token",
            VendorToken,
            format!("EZTK{}", body(ALNUM, 54)),
        ),
        (
            "facebook-page-access-token",
            VendorToken,
            format!("EAAC{}", body(ALNUM, 120)),
        ),
        (
            "flutterwave-secret-key",
            VendorToken,
            format!("FLWSECK_TEST-{}-X", body("abcdef0123", 32)),
        ),
        (
            "flyio-access-token (fo1_)",
            VendorToken,
            format!("fo1_{}", body(ALNUM, 43)),
        ),
        (
            "flyio-access-token (fm2_)",
            VendorToken,
            format!("fm2_{}", body(ALNUM, 120)),
        ),
        (
            "frameio-api-token",
            VendorToken,
            format!("fio-u-{}", body(ALNUM, 64)),
        ),
        (
            "gitlab-cicd-job-token",
            GitlabToken,
            format!("glcbt-1a2b_{}", body(ALNUM, 20)),
        ),
        (
            "gitlab-feature-flag-client-token",
            GitlabToken,
            format!("glffct-{}", body(ALNUM, 20)),
        ),
        (
            "gitlab-feed-token",
            GitlabToken,
            format!("glft-{}", body(ALNUM, 20)),
        ),
        (
            "gitlab-incoming-mail-token",
            GitlabToken,
            format!("glimt-{}", body(ALNUM, 25)),
        ),
        (
            "gitlab-kubernetes-agent-token",
            GitlabToken,
            format!("glagent-{}", body(ALNUM, 50)),
        ),
        (
            "gitlab-oauth-app-secret",
            GitlabToken,
            format!("gloas-{}", body(ALNUM, 64)),
        ),
        (
            "gitlab-rrt",
            GitlabToken,
            format!("GR1348941{}", body(ALNUM, 20)),
        ),
        (
            "gitlab-session-cookie",
            GitlabToken,
            format!("_gitlab_session={}", body(LOWER, 32)),
        ),
        (
            "grafana-api-key",
            GrafanaToken,
            format!("eyJrIjoi{}", body(ALNUM, 80)),
        ),
        (
            "huggingface-organization-api-token",
            HuggingfaceToken,
            format!("api_org_{}", body("QmXkWnLpRtVbYcZdFhJgKs", 34)),
        ),
        (
            "infracost-api-token",
            VendorToken,
            format!("ico-{}", body(ALNUM, 32)),
        ),
        (
            "intra42-client-secret",
            VendorToken,
            format!("s-s4t2ud-{}", body(HEX, 64)),
        ),
        (
            "notion-api-token",
            VendorToken,
            format!("ntn_{}{}", body("0123456789", 11), body(ALNUM, 35)),
        ),
        (
            "octopus-deploy-api-key",
            VendorToken,
            format!("API-{}", body(UPPER, 26)),
        ),
        (
            "openshift-user-token",
            VendorToken,
            format!("sha256~{}", body(ALNUM, 43)),
        ),
        (
            "perplexity-api-key",
            VendorToken,
            format!("pplx-{}", body(ALNUM, 48)),
        ),
        (
            "planetscale-api-token",
            VendorToken,
            format!("pscale_tkn_{}", body(ALNUM, 40)),
        ),
        (
            "planetscale-oauth-token",
            VendorToken,
            format!("pscale_oauth_{}", body(ALNUM, 40)),
        ),
        (
            "planetscale-password",
            VendorToken,
            format!("pscale_pw_{}", body(ALNUM, 40)),
        ),
        (
            "prefect-api-token",
            VendorToken,
            format!("pnu_{}", body(ALNUM, 36)),
        ),
        (
            "pulumi-api-token",
            VendorToken,
            format!("pul-{}", body(HEX, 40)),
        ),
        (
            "readme-api-token",
            VendorToken,
            format!("rdme_{}", body(LOWER, 70)),
        ),
        (
            "rubygems-api-token",
            VendorToken,
            format!("rubygems_{}", body(HEX, 48)),
        ),
        (
            "scalingo-api-token",
            VendorToken,
            format!("tk-us-{}", body(ALNUM, 48)),
        ),
        (
            "sendinblue-api-token",
            VendorToken,
            format!("xkeysib-{}-{}", body(HEX, 64), body(ALNUM, 16)),
        ),
        (
            "sentry-user-token",
            VendorToken,
            format!("sntryu_{}", body(HEX, 64)),
        ),
        (
            "settlemint-personal-access-token",
            VendorToken,
            format!("sm_pat_{}", body(ALNUM, 16)),
        ),
        (
            "shippo-api-token",
            VendorToken,
            format!("shippo_live_{}", body(HEX, 40)),
        ),
        (
            "sourcegraph-access-token",
            VendorToken,
            format!("sgp_{}", body(HEX, 40)),
        ),
        (
            "square-access-token",
            VendorToken,
            format!("sq0atp-{}", body(ALNUM, 22)),
        ),
        (
            "stripe-access-token (prod)",
            StripeKey,
            format!("sk_prod_{}", body(ALNUM, 24)),
        ),
        (
            "new-relic-user-api-key",
            VendorToken,
            format!("NRAK-{}", body(UPPER, 27)),
        ),
        (
            "new-relic-insert-key",
            VendorToken,
            format!("NRII-{}", body(LOWER, 32)),
        ),
        (
            "new-relic-browser-api-token",
            VendorToken,
            format!("NRJS-{}", body(HEX, 19)),
        ),
        (
            "mailgun-pub-key",
            MailgunKey,
            format!("pubkey-{}", body(HEX, 32)),
        ),
        (
            "typeform-api-token",
            VendorToken,
            format!("tfp_{}", body(ALNUM, 59)),
        ),
        (
            "cloudflare-origin-ca-key",
            VendorToken,
            format!("v1.0-{}-{}", body(HEX, 24), body(HEX, 146)),
        ),
        (
            "clickhouse-cloud-api-secret-key",
            VendorToken,
            format!("4b1d{}", body(ALNUM, 38)),
        ),
    ]
}

#[test]
fn gitleaks_prefixed_rules_are_redacted_in_a_command() {
    let mut missed = Vec::new();
    for (rule, kind, token) in gitleaks_prefixed() {
        let text = format!("echo {token} > /tmp/t && curl -d @/tmp/t https://x.example");
        let (out, found) = redact(&text);
        let placeholder = format!("<REDACTED:{}>", kind.as_str());
        if out.contains(&token) || !out.contains(&placeholder) {
            missed.push(format!("{rule}: {out} {found:?}"));
        }
    }
    assert!(
        missed.is_empty(),
        "not redacted as expected:\n{}",
        missed.join("\n")
    );
}

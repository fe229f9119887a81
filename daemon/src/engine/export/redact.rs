//! Secret redaction for exported datasets: finds tokens, keys and passwords in free text and
//! replaces each with a typed placeholder such as `<REDACTED:github_token>`.
//!
//! Hand-written matchers, no `regex` (they were written when this lived in the policy crate, which
//! the hook links; only the daemon uses them now, and they stay: each format is a small scanner
//! over bytes, linear in the input, all patterns ASCII so every span starts and ends on a char
//! boundary). The prefixed table is checked against gitleaks' default rules
//! (gitleaks/gitleaks, `config/gitleaks.toml`): every rule with a literal prefix has an entry
//! and a case in `daemon/tests/it/export_redaction.rs`; gitleaks' contextual rules (a vendor's
//! name, then `=`/`:`, then the value) are covered by the assignment matchers below. Three
//! families:
//!
//! - **prefixed tokens** (`ghp_…`, `AKIA…`, `xoxb-…`, `sk-…`): a literal prefix at a word boundary,
//!   then a run of one character class whose length must fit the format (a longer run is a longer
//!   word, not a token);
//! - **structured secrets** (JWTs, PEM private key blocks, `scheme://user:pass@host`, auth headers,
//!   Slack/Discord webhooks, Telegram bot tokens, `curl -u user:pass`, `mysql -pPASS`);
//! - **contextual values**: the value of an assignment, JSON/YAML field or long flag whose *name*
//!   says it is secret (`PGPASSWORD=`, `"private_key":`, `--api-key=`), and — with no such name — an
//!   assigned value that is long, mixed-case, high-entropy and not base64 of printable text.
//!
//! Overlapping matches resolve to the earliest, then longest, then most specific one. Placeholders
//! are never matched again, so redaction is idempotent.

use serde::{Deserialize, Serialize};

/// What kind of secret a redaction replaced; its snake_case name is the placeholder's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretKind {
    AwsAccessKey,
    AwsSecretKey,
    GithubToken,
    GitlabToken,
    SlackToken,
    SlackWebhook,
    DiscordWebhook,
    StripeKey,
    OpenaiKey,
    AnthropicKey,
    GoogleApiKey,
    GoogleOauthSecret,
    GoogleOauthToken,
    GcpPrivateKey,
    Jwt,
    PrivateKey,
    UrlPassword,
    AuthHeader,
    BearerToken,
    BasicCredentials,
    PasswordFlag,
    PasswordAssignment,
    TokenAssignment,
    SecretAssignment,
    ApiKeyAssignment,
    PgPassword,
    MysqlPassword,
    NpmToken,
    HerokuKey,
    TwilioKey,
    SendgridKey,
    AzureKey,
    AzureSas,
    DockerAuth,
    VaultToken,
    DatabricksToken,
    DigitaloceanToken,
    ShopifyToken,
    PypiToken,
    MailgunKey,
    TelegramBotToken,
    AtlassianToken,
    LinearKey,
    HuggingfaceToken,
    PostmanKey,
    AgeSecretKey,
    GrafanaToken,
    /// A vendor's token recognised by its literal prefix, from gitleaks' rules, for vendors
    /// without a kind of their own (Doppler, Fly.io, PlanetScale, Sentry, New Relic, …).
    VendorToken,
    HighEntropy,
}

impl SecretKind {
    /// The placeholder label (the serde name).
    pub fn as_str(self) -> &'static str {
        use SecretKind::*;
        match self {
            AwsAccessKey => "aws_access_key",
            AwsSecretKey => "aws_secret_key",
            GithubToken => "github_token",
            GitlabToken => "gitlab_token",
            SlackToken => "slack_token",
            SlackWebhook => "slack_webhook",
            DiscordWebhook => "discord_webhook",
            StripeKey => "stripe_key",
            OpenaiKey => "openai_key",
            AnthropicKey => "anthropic_key",
            GoogleApiKey => "google_api_key",
            GoogleOauthSecret => "google_oauth_secret",
            GoogleOauthToken => "google_oauth_token",
            GcpPrivateKey => "gcp_private_key",
            Jwt => "jwt",
            PrivateKey => "private_key",
            UrlPassword => "url_password",
            AuthHeader => "auth_header",
            BearerToken => "bearer_token",
            BasicCredentials => "basic_credentials",
            PasswordFlag => "password_flag",
            PasswordAssignment => "password_assignment",
            TokenAssignment => "token_assignment",
            SecretAssignment => "secret_assignment",
            ApiKeyAssignment => "api_key_assignment",
            PgPassword => "pg_password",
            MysqlPassword => "mysql_password",
            NpmToken => "npm_token",
            HerokuKey => "heroku_key",
            TwilioKey => "twilio_key",
            SendgridKey => "sendgrid_key",
            AzureKey => "azure_key",
            AzureSas => "azure_sas",
            DockerAuth => "docker_auth",
            VaultToken => "vault_token",
            DatabricksToken => "databricks_token",
            DigitaloceanToken => "digitalocean_token",
            ShopifyToken => "shopify_token",
            PypiToken => "pypi_token",
            MailgunKey => "mailgun_key",
            TelegramBotToken => "telegram_bot_token",
            AtlassianToken => "atlassian_token",
            LinearKey => "linear_key",
            HuggingfaceToken => "huggingface_token",
            PostmanKey => "postman_key",
            AgeSecretKey => "age_secret_key",
            GrafanaToken => "grafana_token",
            VendorToken => "vendor_token",
            HighEntropy => "high_entropy",
        }
    }

    /// Every kind, for documentation and tests.
    pub const ALL: &'static [SecretKind] = &[
        SecretKind::AwsAccessKey,
        SecretKind::AwsSecretKey,
        SecretKind::GithubToken,
        SecretKind::GitlabToken,
        SecretKind::SlackToken,
        SecretKind::SlackWebhook,
        SecretKind::DiscordWebhook,
        SecretKind::StripeKey,
        SecretKind::OpenaiKey,
        SecretKind::AnthropicKey,
        SecretKind::GoogleApiKey,
        SecretKind::GoogleOauthSecret,
        SecretKind::GoogleOauthToken,
        SecretKind::GcpPrivateKey,
        SecretKind::Jwt,
        SecretKind::PrivateKey,
        SecretKind::UrlPassword,
        SecretKind::AuthHeader,
        SecretKind::BearerToken,
        SecretKind::BasicCredentials,
        SecretKind::PasswordFlag,
        SecretKind::PasswordAssignment,
        SecretKind::TokenAssignment,
        SecretKind::SecretAssignment,
        SecretKind::ApiKeyAssignment,
        SecretKind::PgPassword,
        SecretKind::MysqlPassword,
        SecretKind::NpmToken,
        SecretKind::HerokuKey,
        SecretKind::TwilioKey,
        SecretKind::SendgridKey,
        SecretKind::AzureKey,
        SecretKind::AzureSas,
        SecretKind::DockerAuth,
        SecretKind::VaultToken,
        SecretKind::DatabricksToken,
        SecretKind::DigitaloceanToken,
        SecretKind::ShopifyToken,
        SecretKind::PypiToken,
        SecretKind::MailgunKey,
        SecretKind::TelegramBotToken,
        SecretKind::AtlassianToken,
        SecretKind::LinearKey,
        SecretKind::HuggingfaceToken,
        SecretKind::PostmanKey,
        SecretKind::AgeSecretKey,
        SecretKind::GrafanaToken,
        SecretKind::VendorToken,
        SecretKind::HighEntropy,
    ];
}

/// One replaced secret: its kind and where it was in the input (byte offsets, end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redaction {
    pub kind: SecretKind,
    pub start: usize,
    pub end: usize,
}

/// The text with every secret found replaced by `<REDACTED:kind>`, and what was replaced (in input
/// order). Text without secrets comes back unchanged.
pub fn redact(text: &str) -> (String, Vec<Redaction>) {
    let s = text.as_bytes();
    let mut cands: Vec<Cand> = Vec::new();
    word_candidates(s, &mut cands);
    context_candidates(s, &mut cands);
    resolve(text, cands)
}

/// Redacts an argv (one parsed simple command) word by word: each word on its own, plus the
/// formats that need the neighbouring words (`mysql -pPASS`, `sshpass -p PASS`, `--token VALUE`),
/// so a secret never leaks through the parsed parts and no word swallows the next.
pub fn redact_argv(argv: &[String]) -> (Vec<String>, Vec<SecretKind>) {
    let joined = argv.join(" ");
    let mut context: Vec<Cand> = Vec::new();
    context_candidates(joined.as_bytes(), &mut context);
    let mut words = Vec::with_capacity(argv.len());
    let mut kinds = Vec::new();
    let mut offset = 0;
    for w in argv {
        let (start, end) = (offset, offset + w.len());
        let mut cands: Vec<Cand> = Vec::new();
        word_candidates(w.as_bytes(), &mut cands);
        for c in &context {
            let (a, b) = (c.start.max(start), c.end.min(end));
            if a < b {
                cands.push(Cand {
                    start: a - start,
                    end: b - start,
                    ..*c
                });
            }
        }
        let (text, found) = resolve(w, cands);
        kinds.extend(found.iter().map(|r| r.kind));
        words.push(text);
        offset = end + 1;
    }
    (words, kinds)
}

/// Formats recognisable inside one word or line.
fn word_candidates(s: &[u8], cands: &mut Vec<Cand>) {
    prefixed(s, cands);
    jwt(s, cands);
    private_key_blocks(s, cands);
    url_passwords(s, cands);
    headers(s, cands);
    bearer_basic(s, cands);
    webhooks(s, cands);
    telegram(s, cands);
    assignments(s, cands);
    json_fields(s, cands);
}

/// Formats that need the command's other words.
fn context_candidates(s: &[u8], cands: &mut Vec<Cand>) {
    tool_flags(s, cands);
    long_flags(s, cands);
}

/// Picks the earliest, then longest, then most specific of overlapping matches and replaces them.
fn resolve(text: &str, mut cands: Vec<Cand>) -> (String, Vec<Redaction>) {
    let s = text.as_bytes();
    let placeholders = placeholder_spans(s);
    cands.retain(|c| {
        c.end > c.start && !placeholders.iter().any(|&(a, b)| c.start < b && a < c.end)
    });
    if cands.is_empty() {
        return (text.to_owned(), Vec::new());
    }
    cands.sort_by_key(|c| (c.start, std::cmp::Reverse(c.end), c.rank));
    let mut out = String::with_capacity(text.len());
    let mut found = Vec::new();
    let mut at = 0;
    for c in cands {
        if c.start < at {
            continue;
        }
        out.push_str(&text[at..c.start]);
        out.push_str("<REDACTED:");
        out.push_str(c.kind.as_str());
        out.push('>');
        found.push(Redaction {
            kind: c.kind,
            start: c.start,
            end: c.end,
        });
        at = c.end;
    }
    out.push_str(&text[at..]);
    (out, found)
}

const PLACEHOLDER_HEAD: &[u8] = b"<REDACTED:";

/// Placeholders already in the text: nothing inside one is matched again (idempotence).
fn placeholder_spans(s: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(i) = find(s, from, PLACEHOLDER_HEAD) {
        let end = run(s, i + PLACEHOLDER_HEAD.len(), Class::Word);
        if s.get(end) == Some(&b'>') {
            spans.push((i, end + 1));
        }
        from = end.max(i + 1);
    }
    spans
}

/// A match before overlap resolution.
#[derive(Debug, Clone, Copy)]
struct Cand {
    start: usize,
    end: usize,
    kind: SecretKind,
    /// Tie-break between equal spans, lower wins: 0 a token format, 1 a structured secret or a
    /// flag, 2 a value known only by its name or entropy.
    rank: u8,
}

fn push(out: &mut Vec<Cand>, start: usize, end: usize, kind: SecretKind, rank: u8) {
    out.push(Cand {
        start,
        end,
        kind,
        rank,
    });
}

// ---------------------------------------------------------------------------------------------
// Character classes and small helpers.

#[derive(Debug, Clone, Copy)]
enum Class {
    /// `[A-Za-z0-9]`
    Alnum,
    /// `[A-Za-z]`
    Alpha,
    /// `[a-z0-9]`
    LowerAlnum,
    /// `[A-Z0-9]`
    UpperAlnum,
    /// `[A-Za-z0-9_]`
    Word,
    /// `[A-Za-z0-9_-]`
    Base64Url,
    /// `[A-Za-z0-9_.-]`
    Base64UrlDot,
    /// `[0-9a-f]`
    LowerHex,
    /// `[0-9a-fA-F]`
    Hex,
    /// `[A-Za-z0-9-]`
    AlnumDash,
    /// `[A-Za-z0-9_=-]`
    Base64UrlEq,
    /// `[A-Za-z0-9+/=]`
    Base64,
}

impl Class {
    fn has(self, b: u8) -> bool {
        match self {
            Class::Alnum => b.is_ascii_alphanumeric(),
            Class::Alpha => b.is_ascii_alphabetic(),
            Class::LowerAlnum => b.is_ascii_lowercase() || b.is_ascii_digit(),
            Class::UpperAlnum => b.is_ascii_uppercase() || b.is_ascii_digit(),
            Class::Word => b.is_ascii_alphanumeric() || b == b'_',
            Class::Base64Url => b.is_ascii_alphanumeric() || b == b'_' || b == b'-',
            Class::Base64UrlDot => b.is_ascii_alphanumeric() || b"_.-".contains(&b),
            Class::LowerHex => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
            Class::Hex => b.is_ascii_hexdigit(),
            Class::AlnumDash => b.is_ascii_alphanumeric() || b == b'-',
            Class::Base64UrlEq => b.is_ascii_alphanumeric() || b"_=-".contains(&b),
            Class::Base64 => b.is_ascii_alphanumeric() || b"+/=".contains(&b),
        }
    }
}

/// End of the run of `class` bytes starting at `i`.
fn run(s: &[u8], i: usize, class: Class) -> usize {
    let mut j = i;
    while j < s.len() && class.has(s[j]) {
        j += 1;
    }
    j
}

/// No letter or digit right before `i`.
fn starts_word(s: &[u8], i: usize) -> bool {
    i == 0 || !s[i - 1].is_ascii_alphanumeric()
}

fn find(s: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || from >= s.len() {
        return None;
    }
    s[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn find_ci(s: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || from >= s.len() {
        return None;
    }
    s[from..]
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
        .map(|p| p + from)
}

/// Every position of `needle` (case-insensitive).
fn all_ci<'a>(s: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = find_ci(s, from, needle)?;
        from = at + 1;
        Some(at)
    })
}

/// Ends a bare (unquoted) value.
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace() || b";&|()<>\"'`,{}[]".contains(&b)
}

/// The span of a value starting at `i`: inside its quotes if quoted, else up to a delimiter.
fn value_span(s: &[u8], i: usize) -> Option<(usize, usize)> {
    let first = *s.get(i)?;
    if first == b'"' || first == b'\'' {
        let mut j = i + 1;
        while j < s.len() && s[j] != first && s[j] != b'\n' {
            if s[j] == b'\\' && first == b'"' {
                j += 1;
            }
            j += 1;
        }
        let end = j.min(s.len());
        return (end > i + 1).then_some((i + 1, end));
    }
    let mut j = i;
    while j < s.len() && !ends_value(s[j]) {
        j += 1;
    }
    (j > i).then_some((i, j))
}

/// A value that is a reference, a placeholder or a flag word, not a literal secret.
fn not_a_literal(v: &[u8]) -> bool {
    v.is_empty()
        || v[0] == b'$'
        || (v[0] == b'-' && !v.starts_with(b"-----"))
        || v.starts_with(PLACEHOLDER_HEAD)
        || v.starts_with(b"%")
        || v.starts_with(b"{{")
}

/// Booleans, small numbers and other values no secret looks like.
fn trivial(v: &[u8]) -> bool {
    const WORDS: &[&[u8]] = &[
        b"true", b"false", b"yes", b"no", b"on", b"off", b"null", b"none", b"nil", b"0", b"1",
    ];
    WORDS.iter().any(|w| v.eq_ignore_ascii_case(w))
        || (v.len() <= 5 && v.iter().all(u8::is_ascii_digit))
}

// ---------------------------------------------------------------------------------------------
// Prefixed tokens.

struct Prefixed {
    prefix: &'static [u8],
    class: Class,
    min: usize,
    max: usize,
    kind: SecretKind,
}

const fn p(
    prefix: &'static [u8],
    class: Class,
    min: usize,
    max: usize,
    kind: SecretKind,
) -> Prefixed {
    Prefixed {
        prefix,
        class,
        min,
        max,
        kind,
    }
}

/// Longer prefixes first where one prefix starts another (`sk-ant-` before `sk-`).
const PREFIXED: &[Prefixed] = {
    use Class::*;
    use SecretKind::*;
    &[
        p(b"AKIA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"ASIA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"AGPA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"AIDA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"AROA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"AIPA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"ANPA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"ANVA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"ABIA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"ACCA", UpperAlnum, 16, 16, AwsAccessKey),
        p(b"github_pat_", Word, 30, 255, GithubToken),
        p(b"ghp_", Alnum, 36, 251, GithubToken),
        p(b"gho_", Alnum, 36, 251, GithubToken),
        p(b"ghu_", Alnum, 36, 251, GithubToken),
        p(b"ghs_", Alnum, 36, 251, GithubToken),
        p(b"ghr_", Alnum, 36, 251, GithubToken),
        p(b"glpat-", Base64Url, 20, 64, GitlabToken),
        p(b"gldt-", Base64Url, 20, 64, GitlabToken),
        p(b"glrt-", Base64Url, 20, 64, GitlabToken),
        p(b"glptt-", Base64Url, 20, 64, GitlabToken),
        p(b"glsoat-", Base64Url, 20, 64, GitlabToken),
        p(b"xoxb-", AlnumDash, 10, 255, SlackToken),
        p(b"xoxp-", AlnumDash, 10, 255, SlackToken),
        p(b"xoxa-", AlnumDash, 10, 255, SlackToken),
        p(b"xoxr-", AlnumDash, 10, 255, SlackToken),
        p(b"xoxs-", AlnumDash, 10, 255, SlackToken),
        p(b"xoxe.xoxp-", AlnumDash, 10, 255, SlackToken),
        p(b"xoxe-", AlnumDash, 10, 255, SlackToken),
        p(b"xapp-", AlnumDash, 10, 255, SlackToken),
        p(b"sk_live_", Alnum, 16, 255, StripeKey),
        p(b"sk_test_", Alnum, 16, 255, StripeKey),
        p(b"rk_live_", Alnum, 16, 255, StripeKey),
        p(b"rk_test_", Alnum, 16, 255, StripeKey),
        p(b"whsec_", Alnum, 24, 255, StripeKey),
        p(b"sk-ant-", Base64Url, 20, 255, AnthropicKey),
        p(b"sk-", Base64Url, 20, 255, OpenaiKey),
        p(b"AIza", Base64Url, 35, 35, GoogleApiKey),
        p(b"GOCSPX-", Base64Url, 28, 28, GoogleOauthSecret),
        p(b"ya29.", Base64UrlDot, 20, 2048, GoogleOauthToken),
        p(b"npm_", Alnum, 36, 36, NpmToken),
        p(b"HRKU-", Base64Url, 20, 255, HerokuKey),
        p(b"SK", LowerHex, 32, 32, TwilioKey),
        p(b"SG.", Base64UrlDot, 60, 80, SendgridKey),
        p(b"hvs.", Base64Url, 24, 255, VaultToken),
        p(b"hvb.", Base64Url, 24, 255, VaultToken),
        p(b"hvr.", Base64Url, 24, 255, VaultToken),
        p(b"dapi", LowerHex, 32, 32, DatabricksToken),
        p(b"dop_v1_", LowerHex, 64, 64, DigitaloceanToken),
        p(b"doo_v1_", LowerHex, 64, 64, DigitaloceanToken),
        p(b"dor_v1_", LowerHex, 64, 64, DigitaloceanToken),
        p(b"shpat_", Hex, 32, 32, ShopifyToken),
        p(b"shpss_", Hex, 32, 32, ShopifyToken),
        p(b"shpca_", Hex, 32, 32, ShopifyToken),
        p(b"shppa_", Hex, 32, 32, ShopifyToken),
        p(b"pypi-", Base64Url, 50, 255, PypiToken),
        p(b"key-", LowerAlnum, 32, 32, MailgunKey),
        p(b"ATATT3", Base64UrlEq, 50, 300, AtlassianToken),
        p(b"lin_api_", Alnum, 40, 40, LinearKey),
        p(b"hf_", Alpha, 34, 34, HuggingfaceToken),
        p(b"PMAK-", AlnumDash, 50, 70, PostmanKey),
        p(b"AGE-SECRET-KEY-1", UpperAlnum, 58, 58, AgeSecretKey),
        p(b"glc_", Base64Url, 32, 255, GrafanaToken),
        p(b"glsa_", Word, 32, 255, GrafanaToken),
        // Gitleaks' default rules (gitleaks/gitleaks, config/gitleaks.toml) with a literal prefix
        // that the entries above did not know; the rule ids are in the table test
        // (daemon/tests/it/export_redaction.rs, `gitleaks_prefixed`).
        p(b"A3T", UpperAlnum, 17, 17, AwsAccessKey),
        p(b"glcbt-", Base64Url, 22, 64, GitlabToken),
        p(b"glffct-", Base64Url, 20, 64, GitlabToken),
        p(b"glft-", Base64Url, 20, 64, GitlabToken),
        p(b"glimt-", Base64Url, 20, 64, GitlabToken),
        p(b"glagent-", Base64Url, 20, 64, GitlabToken),
        p(b"gloas-", Base64Url, 20, 64, GitlabToken),
        p(b"GR1348941", Base64Url, 20, 64, GitlabToken),
        p(b"_gitlab_session=", LowerAlnum, 32, 32, GitlabToken),
        p(b"sk_prod_", Alnum, 10, 255, StripeKey),
        p(b"rk_prod_", Alnum, 10, 255, StripeKey),
        p(b"eyJrIjoi", Base64, 70, 400, GrafanaToken),
        p(b"api_org_", Alpha, 34, 34, HuggingfaceToken),
        p(b"pubkey-", LowerHex, 32, 32, MailgunKey),
        p(b"ops_eyJ", Base64, 250, 4096, VendorToken),
        p(b"p8e-", Alnum, 32, 32, VendorToken),
        p(b"LTAI", Alnum, 20, 20, VendorToken),
        p(b"AKCp", Alnum, 69, 69, VendorToken),
        p(b"CLOJARS_", Alnum, 60, 60, VendorToken),
        p(b"dp.pt.", Alnum, 43, 43, VendorToken),
        p(b"duffel_test_", Base64UrlEq, 43, 43, VendorToken),
        p(b"duffel_live_", Base64UrlEq, 43, 43, VendorToken),
        p(b"dt0c01.", Base64UrlDot, 89, 89, VendorToken),
        p(b"EZAK", Alnum, 54, 54, VendorToken),
        p(b"EZTK", Alnum, 54, 54, VendorToken),
        p(b"EAAC", Alnum, 100, 1024, VendorToken),
        p(b"EAAM", Alnum, 100, 1024, VendorToken),
        p(b"EAAA", Base64Url, 22, 60, VendorToken),
        p(b"FLWSECK_TEST-", AlnumDash, 12, 40, VendorToken),
        p(b"fo1_", Base64Url, 43, 43, VendorToken),
        p(b"fm1a_", Base64, 100, 4096, VendorToken),
        p(b"fm1r_", Base64, 100, 4096, VendorToken),
        p(b"fm2_", Base64, 100, 4096, VendorToken),
        p(b"fio-u-", Base64UrlEq, 64, 64, VendorToken),
        p(b"ico-", Alnum, 32, 32, VendorToken),
        p(b"s-s4t2ud-", Hex, 64, 64, VendorToken),
        p(b"s-s4t2af-", Hex, 64, 64, VendorToken),
        p(b"ntn_", Alnum, 46, 46, VendorToken),
        p(b"API-", UpperAlnum, 26, 26, VendorToken),
        p(b"sha256~", Base64Url, 43, 43, VendorToken),
        p(b"pplx-", Alnum, 48, 48, VendorToken),
        p(b"pscale_tkn_", Base64UrlDot, 32, 64, VendorToken),
        p(b"pscale_oauth_", Base64UrlDot, 32, 64, VendorToken),
        p(b"pscale_pw_", Base64UrlDot, 32, 64, VendorToken),
        p(b"pnu_", Alnum, 36, 36, VendorToken),
        p(b"pul-", LowerHex, 40, 40, VendorToken),
        p(b"rdme_", LowerAlnum, 70, 70, VendorToken),
        p(b"rubygems_", LowerHex, 48, 48, VendorToken),
        p(b"tk-us-", Base64Url, 48, 48, VendorToken),
        p(b"xkeysib-", AlnumDash, 81, 81, VendorToken),
        p(b"sntryu_", LowerHex, 64, 64, VendorToken),
        p(b"sm_pat_", Alnum, 16, 16, VendorToken),
        p(b"sm_aat_", Alnum, 16, 16, VendorToken),
        p(b"sm_sat_", Alnum, 16, 16, VendorToken),
        p(b"shippo_live_", Hex, 40, 40, VendorToken),
        p(b"shippo_test_", Hex, 40, 40, VendorToken),
        p(b"sgp_", Word, 40, 80, VendorToken),
        p(b"sq0atp-", Base64Url, 22, 60, VendorToken),
        p(b"NRAK-", UpperAlnum, 27, 27, VendorToken),
        p(b"NRII-", AlnumDash, 32, 32, VendorToken),
        p(b"NRJS-", LowerHex, 19, 19, VendorToken),
        p(b"tfp_", Base64UrlDot, 59, 59, VendorToken),
        p(b"v1.0-", AlnumDash, 171, 171, VendorToken),
        p(b"4b1d", Alnum, 38, 38, VendorToken),
    ]
};

fn prefixed(s: &[u8], out: &mut Vec<Cand>) {
    for i in 0..s.len() {
        if !starts_word(s, i) {
            continue;
        }
        let b = s[i];
        for t in PREFIXED {
            if t.prefix[0] != b || !s[i..].starts_with(t.prefix) {
                continue;
            }
            let body = i + t.prefix.len();
            let end = run(s, body, t.class);
            let len = end - body;
            // A longer run of the same class is a longer word; a letter right after is too.
            let glued = end < s.len() && s[end].is_ascii_alphanumeric();
            if (t.min..=t.max).contains(&len) && !glued {
                push(out, i, end, t.kind, 0);
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Structured secrets.

/// `eyJ<header>.eyJ<payload>.<signature>`.
fn jwt(s: &[u8], out: &mut Vec<Cand>) {
    let mut from = 0;
    while let Some(i) = find(s, from, b"eyJ") {
        from = i + 1;
        if !starts_word(s, i) {
            continue;
        }
        let h = run(s, i, Class::Base64Url);
        if h - i < 10 || s.get(h) != Some(&b'.') || !s[h + 1..].starts_with(b"eyJ") {
            continue;
        }
        let p = run(s, h + 1, Class::Base64Url);
        if p - (h + 1) < 10 || s.get(p) != Some(&b'.') {
            continue;
        }
        let sig = run(s, p + 1, Class::Base64Url);
        if sig - (p + 1) >= 10 {
            push(out, i, sig, SecretKind::Jwt, 1);
            from = sig;
        }
    }
}

/// `-----BEGIN … PRIVATE KEY[ BLOCK]-----` through its `-----END …-----` (or the end of the text).
fn private_key_blocks(s: &[u8], out: &mut Vec<Cand>) {
    let mut from = 0;
    while let Some(i) = find(s, from, b"-----BEGIN ") {
        from = i + 1;
        let Some(head_end) = find(s, i + 11, b"-----") else {
            continue;
        };
        let label = &s[i + 11..head_end];
        if find(label, 0, b"PRIVATE KEY").is_none() || label.contains(&b'\n') {
            continue;
        }
        let end = match find(s, head_end + 5, b"-----END ") {
            Some(e) => find(s, e + 9, b"-----").map_or(s.len(), |t| t + 5),
            None => s.len(),
        };
        push(out, i, end, SecretKind::PrivateKey, 1);
        from = end;
    }
}

/// The password of `scheme://user:password@host`.
fn url_passwords(s: &[u8], out: &mut Vec<Cand>) {
    let mut from = 0;
    while let Some(i) = find(s, from, b"://") {
        from = i + 3;
        // A scheme: a letter, then letters, digits, + . -
        let mut k = i;
        while k > 0 && (s[k - 1].is_ascii_alphanumeric() || b"+.-".contains(&s[k - 1])) {
            k -= 1;
        }
        if k == i || !s[k].is_ascii_alphabetic() {
            continue;
        }
        let auth_start = i + 3;
        let mut j = auth_start;
        let mut at = None;
        while j < s.len() && !s[j].is_ascii_whitespace() && !b"/?#\"'<>`".contains(&s[j]) {
            if s[j] == b'@' {
                at = Some(j);
            }
            j += 1;
        }
        let Some(at) = at else { continue };
        let Some(colon) = s[auth_start..at].iter().position(|&b| b == b':') else {
            continue;
        };
        let pw = auth_start + colon + 1;
        if at > pw && !not_a_literal(&s[pw..at]) {
            push(out, pw, at, SecretKind::UrlPassword, 1);
        }
    }
}

/// Header names whose values are credentials.
const SECRET_HEADERS: &[&[u8]] = &[
    b"proxy-authorization",
    b"authorization",
    b"x-api-key",
    b"api-key",
    b"x-auth-token",
    b"private-token",
    b"x-vault-token",
    b"x-goog-api-key",
    b"cookie",
];

/// `Authorization: <value>` and friends: the whole value up to the end of the line or quote.
fn headers(s: &[u8], out: &mut Vec<Cand>) {
    for name in SECRET_HEADERS {
        for i in all_ci(s, name) {
            if i > 0 && (s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'-') {
                continue;
            }
            let mut j = i + name.len();
            if s.get(j) != Some(&b':') {
                continue;
            }
            j += 1;
            while j < s.len() && (s[j] == b' ' || s[j] == b'\t') {
                j += 1;
            }
            let start = j;
            while j < s.len() && !b"\r\n\"'".contains(&s[j]) {
                j += 1;
            }
            while j > start && s[j - 1].is_ascii_whitespace() {
                j -= 1;
            }
            if j > start && !not_a_literal(&s[start..j]) {
                push(out, start, j, SecretKind::AuthHeader, 1);
            }
        }
    }
}

fn token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"._~+/=-".contains(&b)
}

/// `Bearer <token>` (16+ token characters) and `Basic <base64 of user:pass>` anywhere.
fn bearer_basic(s: &[u8], out: &mut Vec<Cand>) {
    for i in all_ci(s, b"bearer ") {
        if !starts_word(s, i) {
            continue;
        }
        let start = i + 7;
        let mut j = start;
        while j < s.len() && token_char(s[j]) {
            j += 1;
        }
        if j - start >= 16 {
            push(out, start, j, SecretKind::BearerToken, 1);
        }
    }
    for i in all_ci(s, b"basic ") {
        if !starts_word(s, i) {
            continue;
        }
        let start = i + 6;
        let mut j = start;
        while j < s.len() && token_char(s[j]) {
            j += 1;
        }
        if j - start >= 8 && decodes_to_credentials(&s[start..j]) {
            push(out, start, j, SecretKind::BasicCredentials, 1);
        }
    }
}

fn decodes_to_credentials(b64: &[u8]) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .is_ok_and(|d| d.contains(&b':') && d.iter().all(|b| (0x20..0x7f).contains(b)))
}

/// Slack and Discord webhook URLs: the path after the fixed part is the credential.
fn webhooks(s: &[u8], out: &mut Vec<Cand>) {
    for (marker, kind) in [
        (&b"hooks.slack.com/services/"[..], SecretKind::SlackWebhook),
        (&b"hooks.slack.com/workflows/"[..], SecretKind::SlackWebhook),
        (
            &b"discord.com/api/webhooks/"[..],
            SecretKind::DiscordWebhook,
        ),
        (
            &b"discordapp.com/api/webhooks/"[..],
            SecretKind::DiscordWebhook,
        ),
    ] {
        for i in all_ci(s, marker) {
            let start = i + marker.len();
            let mut j = start;
            while j < s.len() && (s[j].is_ascii_alphanumeric() || b"/_-".contains(&s[j])) {
                j += 1;
            }
            if j - start >= 16 {
                push(out, start, j, kind, 1);
            }
        }
    }
}

/// Telegram bot tokens: `<8-10 digits>:<35 base64url characters>`.
fn telegram(s: &[u8], out: &mut Vec<Cand>) {
    for (c, _) in s.iter().enumerate().filter(|(_, &b)| b == b':') {
        let mut k = c;
        while k > 0 && s[k - 1].is_ascii_digit() {
            k -= 1;
        }
        // A token at a word start, or in a bot API URL (`/bot<token>/getMe`).
        if !(8..=10).contains(&(c - k)) || !(starts_word(s, k) || s[..k].ends_with(b"bot")) {
            continue;
        }
        let end = run(s, c + 1, Class::Base64Url);
        if end - (c + 1) == 35 && !(end < s.len() && s[end].is_ascii_alphanumeric()) {
            push(out, k, end, SecretKind::TelegramBotToken, 1);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tool-specific flags: `mysql -pPASS`, `sshpass -p PASS`, `docker login -p PASS`, `curl -u u:p`.

/// One whitespace-separated word of a command segment, quotes kept, with its byte span.
#[derive(Debug, Clone, Copy)]
struct Tok {
    start: usize,
    end: usize,
}

/// Splits `s` into segments at newlines and shell operators, each into words.
fn segments(s: &[u8]) -> Vec<Vec<Tok>> {
    let mut segs = Vec::new();
    let mut cur: Vec<Tok> = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b == b'\n' || b == b';' || b == b'|' || b == b'&' {
            if !cur.is_empty() {
                segs.push(std::mem::take(&mut cur));
            }
            i += 1;
            continue;
        }
        if b.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let mut quote: Option<u8> = None;
        while i < s.len() {
            let c = s[i];
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == b'"' || c == b'\'' => quote = Some(c),
                None if c.is_ascii_whitespace() || b";|&".contains(&c) => break,
                None => {}
            }
            i += 1;
        }
        cur.push(Tok { start, end: i });
    }
    if !cur.is_empty() {
        segs.push(cur);
    }
    segs
}

/// The word's span without one pair of surrounding quotes.
fn unquoted(s: &[u8], t: Tok) -> (usize, usize) {
    let w = &s[t.start..t.end];
    if w.len() >= 2 && (w[0] == b'"' || w[0] == b'\'') && w[w.len() - 1] == w[0] {
        (t.start + 1, t.end - 1)
    } else {
        (t.start, t.end)
    }
}

fn basename(w: &[u8]) -> &[u8] {
    match w.iter().rposition(|&b| b == b'/') {
        Some(p) => &w[p + 1..],
        None => w,
    }
}

const MYSQL_TOOLS: &[&[u8]] = &[
    b"mysql",
    b"mysqldump",
    b"mysqladmin",
    b"mysqlimport",
    b"mysqlcheck",
    b"mysqlshow",
    b"mysqlpump",
    b"mysqlsh",
    b"mariadb",
    b"mariadb-dump",
    b"mariadb-admin",
];

/// Tools whose `--password` is a boolean (prompt) flag: a following word is not a password.
const PROMPTING_TOOLS: &[&[u8]] = &[
    b"psql",
    b"pg_dump",
    b"pg_dumpall",
    b"pg_restore",
    b"pg_basebackup",
    b"createdb",
    b"dropdb",
    b"createuser",
    b"dropuser",
    b"vacuumdb",
    b"reindexdb",
    b"clusterdb",
];

fn tool_flags(s: &[u8], out: &mut Vec<Cand>) {
    for seg in segments(s) {
        let names: Vec<&[u8]> = seg.iter().map(|t| basename(&s[t.start..t.end])).collect();
        let has = |set: &[&[u8]]| names.iter().any(|n| set.contains(n));
        let mysql = has(MYSQL_TOOLS);
        let sshpass = has(&[b"sshpass"]);
        let login = names.contains(&&b"login"[..])
            && has(&[
                b"docker", b"podman", b"buildah", b"skopeo", b"nerdctl", b"helm", b"oras",
            ]);
        let curl = has(&[b"curl"]);
        for (k, t) in seg.iter().enumerate() {
            let w = &s[t.start..t.end];
            let next = seg.get(k + 1).copied();
            if mysql && w.len() > 2 && w.starts_with(b"-p") {
                flag_value(s, *t, None, SecretKind::MysqlPassword, out);
            } else if (sshpass || login) && w == b"-p" {
                flag_value(s, *t, next, SecretKind::PasswordFlag, out);
            } else if sshpass && w.len() > 2 && w.starts_with(b"-p") {
                flag_value(s, *t, None, SecretKind::PasswordFlag, out);
            } else if curl && (w == b"-u" || w == b"--user" || w == b"--proxy-user") {
                if let Some(n) = next {
                    let (a, b) = unquoted(s, n);
                    if let Some(c) = s[a..b].iter().position(|&x| x == b':') {
                        if a + c + 1 < b && !not_a_literal(&s[a + c + 1..b]) {
                            push(out, a + c + 1, b, SecretKind::BasicCredentials, 1);
                        }
                    }
                }
            } else if curl && w.len() > 2 && w.starts_with(b"-u") {
                if let Some(c) = w.iter().position(|&x| x == b':') {
                    let (a, b) = (t.start + c + 1, unquoted(s, *t).1);
                    if b > a && !not_a_literal(&s[a..b]) {
                        push(out, a, b, SecretKind::BasicCredentials, 1);
                    }
                }
            }
        }
    }
}

/// The value of a short flag: attached (`-pVALUE`, `next` is `None`) or the next word.
fn flag_value(s: &[u8], flag: Tok, next: Option<Tok>, kind: SecretKind, out: &mut Vec<Cand>) {
    let (a, b) = match next {
        Some(n) => unquoted(s, n),
        None => {
            let (mut a, mut b) = (flag.start + 2, flag.end);
            if b > a && (s[a] == b'"' || s[a] == b'\'') {
                a += 1;
            }
            if b > a && (s[b - 1] == b'"' || s[b - 1] == b'\'') {
                b -= 1;
            }
            (a, b)
        }
    };
    if b > a && !not_a_literal(&s[a..b]) {
        push(out, a, b, kind, 1);
    }
}

/// Long flag names (after `--`, lower case) whose value is a credential, by suffix.
const SECRET_FLAG_SUFFIXES: &[&[u8]] = &[
    b"password",
    b"passwd",
    b"passphrase",
    b"token",
    b"api-key",
    b"apikey",
    b"secret",
    b"secret-key",
    b"access-key",
];

/// `--password=…`, `--api-key …`, `--client-secret=…` (not `--password-file`, `--no-password`, or
/// a prompting tool's boolean `--password`).
fn long_flags(s: &[u8], out: &mut Vec<Cand>) {
    for seg in segments(s) {
        let prompting = seg.iter().any(|t| {
            PROMPTING_TOOLS.contains(&basename(&s[t.start..t.end]))
                || MYSQL_TOOLS.contains(&basename(&s[t.start..t.end]))
        });
        for (k, t) in seg.iter().enumerate() {
            let w = &s[t.start..t.end];
            if !w.starts_with(b"--") {
                continue;
            }
            let name_end = w.iter().position(|&b| b == b'=').unwrap_or(w.len());
            let name = w[2..name_end].to_ascii_lowercase();
            if name.starts_with(b"no-")
                || !SECRET_FLAG_SUFFIXES.iter().any(|suf| name.ends_with(suf))
            {
                continue;
            }
            let kind = if name.ends_with(b"password")
                || name.ends_with(b"passwd")
                || name.ends_with(b"passphrase")
            {
                SecretKind::PasswordFlag
            } else {
                SecretKind::TokenAssignment
            };
            let span = if name_end < w.len() {
                value_span(s, t.start + name_end + 1)
            } else if prompting {
                None
            } else {
                seg.get(k + 1).map(|n| unquoted(s, *n))
            };
            if let Some((a, b)) = span {
                if b > a && !not_a_literal(&s[a..b]) && !trivial(&s[a..b]) {
                    push(out, a, b, kind, 1);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Assignments and fields.

/// The kind a secret-sounding name gives its value, or `None` for an ordinary name.
fn kind_for_name(name: &[u8]) -> Option<SecretKind> {
    use SecretKind::*;
    let up = name.to_ascii_uppercase();
    let up = up.as_slice();
    let has = |n: &[u8]| find(up, 0, n).is_some();
    const NOT_SECRET_SUFFIXES: &[&[u8]] = &[
        b"_FILE",
        b"_PATH",
        b"_DIR",
        b"_ENV",
        b"_LENGTH",
        b"_LEN",
        b"_TTL",
        b"_TYPE",
        b"_NAME",
        b"_ID",
        b"_EXPIRY",
        b"_EXPIRES",
        b"_COUNT",
        b"_URL",
        b"_HOST",
        b"_PORT",
        b"_USER",
        b"_USERNAME",
        b"_MODE",
        b"_CMD",
        b"_COMMAND",
        b"_HELPER",
        b"_SOURCE",
        b"_REF",
        b"_ARN",
    ];
    if NOT_SECRET_SUFFIXES.iter().any(|s| up.ends_with(s)) || has(b"TOKENS") || has(b"TOKENIZER") {
        return None;
    }
    let exact: &[(&[u8], SecretKind)] = &[
        (b"PGPASSWORD", PgPassword),
        (b"MYSQL_PWD", MysqlPassword),
        (b"MYSQL_PASSWORD", MysqlPassword),
        (b"MYSQL_ROOT_PASSWORD", MysqlPassword),
        (b"AWS_SECRET_ACCESS_KEY", AwsSecretKey),
        (b"SECRET_ACCESS_KEY", AwsSecretKey),
        (b"ACCOUNTKEY", AzureKey),
        (b"SHAREDACCESSKEY", AzureKey),
        (b"AZURE_STORAGE_KEY", AzureKey),
        (b"AZURE_CLIENT_SECRET", AzureKey),
        (b"SIG", AzureSas),
        (b"NPM_TOKEN", NpmToken),
        (b"_AUTHTOKEN", NpmToken),
        (b"_AUTH", NpmToken),
        (b"NODE_AUTH_TOKEN", NpmToken),
        (b"HEROKU_API_KEY", HerokuKey),
        (b"TWILIO_AUTH_TOKEN", TwilioKey),
        (b"SENDGRID_API_KEY", SendgridKey),
        (b"AUTH", DockerAuth),
        (b"IDENTITYTOKEN", DockerAuth),
        (b"PRIVATE_KEY", GcpPrivateKey),
        (b"VAULT_TOKEN", VaultToken),
        (b"GITHUB_TOKEN", GithubToken),
        (b"GH_TOKEN", GithubToken),
        (b"GITLAB_TOKEN", GitlabToken),
        (b"OPENAI_API_KEY", OpenaiKey),
        (b"ANTHROPIC_API_KEY", AnthropicKey),
    ];
    if let Some((_, k)) = exact.iter().find(|(n, _)| *n == up) {
        return Some(*k);
    }
    if has(b"PASSWORD") || has(b"PASSWD") || has(b"PASSPHRASE") || (up.ends_with(b"_PWD")) {
        Some(PasswordAssignment)
    } else if has(b"SECRET") {
        Some(SecretAssignment)
    } else if has(b"TOKEN") {
        Some(TokenAssignment)
    } else if has(b"APIKEY")
        || has(b"API_KEY")
        || has(b"ACCESS_KEY")
        || has(b"PRIVATE_KEY")
        || has(b"AUTH_KEY")
        || has(b"SIGNING_KEY")
        || has(b"CREDENTIAL")
        || has(b"ACCOUNTKEY")
    {
        Some(ApiKeyAssignment)
    } else {
        None
    }
}

fn name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `NAME=value` / `NAME = value` (shell, dotenv, ini, connection strings, query strings).
fn assignments(s: &[u8], out: &mut Vec<Cand>) {
    for (eq, _) in s.iter().enumerate().filter(|(_, &b)| b == b'=') {
        // `==`, `!=`, `<=`, `>=` are comparisons.
        if s.get(eq + 1) == Some(&b'=') || (eq > 0 && b"=!<>".contains(&s[eq - 1])) {
            continue;
        }
        let mut k = eq;
        while k > 0 && (s[k - 1] == b' ' || s[k - 1] == b'\t') {
            k -= 1;
        }
        let name_end = k;
        while k > 0 && name_char(s[k - 1]) {
            k -= 1;
        }
        if k == name_end {
            continue;
        }
        let name = &s[k..name_end];
        let mut v = eq + 1;
        while v < s.len() && (s[v] == b' ' || s[v] == b'\t') {
            v += 1;
        }
        let Some((a, b)) = value_span(s, v) else {
            continue;
        };
        let value = &s[a..b];
        if not_a_literal(value) || trivial(value) {
            continue;
        }
        match kind_for_name(name) {
            Some(kind) => push(out, a, b, kind, 2),
            None if high_entropy(value) => push(out, a, b, SecretKind::HighEntropy, 2),
            None => {}
        }
    }
}

/// `"name": "value"` (JSON) and `name: value` (YAML) for secret-sounding names.
fn json_fields(s: &[u8], out: &mut Vec<Cand>) {
    for (colon, _) in s.iter().enumerate().filter(|(_, &b)| b == b':') {
        let mut k = colon;
        while k > 0 && (s[k - 1] == b' ' || s[k - 1] == b'\t') {
            k -= 1;
        }
        let quoted = k > 0 && s[k - 1] == b'"';
        let name_end = if quoted { k - 1 } else { k };
        let mut n = name_end;
        while n > 0 && (name_char(s[n - 1]) || s[n - 1] == b'-') {
            n -= 1;
        }
        if n == name_end || (quoted && (n == 0 || s[n - 1] != b'"')) {
            continue;
        }
        let Some(kind) = kind_for_name(&s[n..name_end]) else {
            continue;
        };
        let mut v = colon + 1;
        while v < s.len() && (s[v] == b' ' || s[v] == b'\t') {
            v += 1;
        }
        // YAML needs a space after the colon (`a:b` is not a mapping); JSON does not.
        if !quoted && v == colon + 1 {
            continue;
        }
        let Some((a, b)) = value_span(s, v) else {
            continue;
        };
        if !not_a_literal(&s[a..b]) && !trivial(&s[a..b]) {
            push(out, a, b, kind, 2);
        }
    }
}

/// Long, mixed-case, high-entropy, and not base64 of printable text (which is data, not a key).
fn high_entropy(v: &[u8]) -> bool {
    if v.len() < 32
        || !v
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=_-".contains(b))
    {
        return false;
    }
    let upper = v.iter().any(u8::is_ascii_uppercase);
    let lower = v.iter().any(u8::is_ascii_lowercase);
    let digit = v.iter().any(u8::is_ascii_digit);
    if !(upper && lower && digit) || shannon(v) < 4.2 {
        return false;
    }
    !base64_of_text(v)
}

fn shannon(v: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &b in v {
        counts[b as usize] += 1;
    }
    let n = v.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

fn base64_of_text(v: &[u8]) -> bool {
    use base64::Engine;
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines.iter().any(|e| {
        e.decode(v).is_ok_and(|d| {
            !d.is_empty()
                && d.iter()
                    .filter(|b| (0x20..0x7f).contains(*b) || b"\n\r\t".contains(b))
                    .count()
                    * 10
                    >= d.len() * 9
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_names_are_the_placeholder_labels() {
        for k in SecretKind::ALL {
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::Value::String(k.as_str().into())
            );
        }
    }

    #[test]
    fn plain_text_comes_back_unchanged() {
        let (out, found) = redact("git status && cargo test -- --nocapture");
        assert_eq!(out, "git status && cargo test -- --nocapture");
        assert!(found.is_empty());
    }
}

//! The one secret-path list: files and directories whose contents must not reach the model without
//! a person saying so. The hook (Bash, Read, Glob, Grep, LS), the daemon and the mirror's masks all
//! compile this table ([`SecretPaths::builtin`]); a test (`policy/tests/it/secret_table.rs`) fails when
//! a second list of secret paths appears anywhere in the workspace's sources.
//!
//! Pattern syntax (see [`SecretPaths`]): `~/…` is anchored at the agent's home, `/…` is absolute;
//! both cover the path and everything under it, and any component may use `*` and `?`. Any other
//! pattern is a file-name pattern matched against every component of a path, case-insensitively.
//!
//! Where the entries come from: the file signatures of secret scanners that look at names (gitrob's
//! `filesignatures.json`, from which shhgit's and wraith's are derived: key files, `.env`, `.netrc`,
//! `.pgpass`, history files, password-manager databases, `*.tfvars`, …), the credential store
//! locations of credential-recovery inventories (LaZagne's Linux modules: browser profiles, keyrings,
//! wallets, database and sysadmin clients), and each tool's own documentation of where it keeps its
//! token (`gh`, `glab`, `gcloud`, `az`, `aws`, `docker`/`podman`, `cargo`, `npm`, `pip`/`twine`,
//! `gem`, `maven`, `gradle`, `composer`, `rclone`, Claude Code, Codex, …). Each entry says why.
//!
//! Environment dumps (`env`, `printenv`, `export -p`, `declare -x`, `set`, `ps e`) read secrets
//! too: agents run with tokens in their environment. Those are commands, not paths; the read
//! classifier decides them ([`crate::shell::read`], `NotReadReason::EnvironmentDump`), and
//! `/proc/*/environ` is in this table.

use crate::shell::read::Comp;
pub use crate::shell::read::SecretPaths;

/// What kind of secret an entry protects (for docs, tests and the mirror's reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Private keys and certificate bundles, by file name.
    PrivateKeys,
    /// SSH and GnuPG key stores.
    SshGpg,
    /// Dotenv and other environment/secret files of a project.
    EnvFiles,
    /// Generic credential file names used by many tools.
    GenericCredentials,
    /// Cloud provider CLIs (tokens, keys, session caches).
    CloudCli,
    /// Container registries and cluster access.
    Containers,
    /// Package registry publish tokens.
    PackageRegistries,
    /// Git hosting credentials.
    VersionControl,
    /// AI coding agents and model provider tokens.
    AiTools,
    /// Database client password files and histories.
    Databases,
    /// Shell and REPL histories (typed passwords, tokens on command lines).
    History,
    /// Browser profiles and desktop apps with saved logins, cookies and session tokens.
    Browsers,
    /// Password managers and keyrings.
    PasswordManagers,
    /// Infrastructure state and variable files that hold credentials in clear.
    Infrastructure,
    /// Cloud-sync and backup tool configs with tokens.
    CloudSync,
    /// Cryptocurrency wallets.
    Wallets,
    /// System secrets: password hashes, host keys, other processes' environment and memory.
    System,
}

impl Category {
    /// Every category, in table order.
    pub const ALL: &'static [Category] = &[
        Category::PrivateKeys,
        Category::SshGpg,
        Category::EnvFiles,
        Category::GenericCredentials,
        Category::CloudCli,
        Category::Containers,
        Category::PackageRegistries,
        Category::VersionControl,
        Category::AiTools,
        Category::Databases,
        Category::History,
        Category::Browsers,
        Category::PasswordManagers,
        Category::Infrastructure,
        Category::CloudSync,
        Category::Wallets,
        Category::System,
    ];

    /// A short name for docs and reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::PrivateKeys => "private keys",
            Category::SshGpg => "SSH and GnuPG",
            Category::EnvFiles => "environment files",
            Category::GenericCredentials => "credential files",
            Category::CloudCli => "cloud CLIs",
            Category::Containers => "containers and clusters",
            Category::PackageRegistries => "package registries",
            Category::VersionControl => "git hosting",
            Category::AiTools => "AI tools",
            Category::Databases => "database clients",
            Category::History => "histories",
            Category::Browsers => "browsers and desktop apps",
            Category::PasswordManagers => "password managers and keyrings",
            Category::Infrastructure => "infrastructure state",
            Category::CloudSync => "cloud sync and backup",
            Category::Wallets => "wallets",
            Category::System => "system",
        }
    }
}

/// One secret path or file-name pattern, and why it is secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretEntry {
    /// The pattern (module docs: `~/…`, `/…`, or a file name).
    pub pattern: &'static str,
    pub category: Category,
    /// One line: what it holds.
    pub why: &'static str,
}

impl SecretEntry {
    /// The entry as an absolute path pattern for `home` (`~/.ssh` ⇒ `/home/me/.ssh`; `*` may remain
    /// in a component), or `None` for a file-name pattern, which has no single place. What the
    /// mirror masks.
    pub fn anchored(&self, home: &str) -> Option<String> {
        if let Some(rest) = self.pattern.strip_prefix("~/") {
            Some(format!("{}/{rest}", home.trim_end_matches('/')))
        } else if self.pattern.starts_with('/') {
            Some(self.pattern.to_owned())
        } else {
            None
        }
    }
}

macro_rules! secret_table {
    ($( $cat:ident $pattern:literal => $why:literal; )*) => {
        /// The secret-path table, by category.
        pub const SECRET_TABLE: &[SecretEntry] = &[
            $( SecretEntry { pattern: $pattern, category: Category::$cat, why: $why }, )*
        ];
        /// The table's patterns alone, in table order (what [`SecretPaths::new`] compiles).
        pub const SECRET_PATTERNS: &[&str] = &[ $( $pattern, )* ];
    };
}

secret_table! {
    // ---- private keys, by name ----
    PrivateKeys "*.pem" => "PEM keys and certificates; private keys are usually PEM";
    PrivateKeys "*.key" => "private key files (TLS, signing, Rails master.key)";
    PrivateKeys "*.p12" => "PKCS#12 bundles carry a private key";
    PrivateKeys "*.pfx" => "PKCS#12 bundles carry a private key";
    PrivateKeys "*.pkcs12" => "PKCS#12 bundles carry a private key";
    PrivateKeys "*.jks" => "Java keystores";
    PrivateKeys "*.keystore" => "Java and Android keystores";
    PrivateKeys "*.ppk" => "PuTTY private keys";
    PrivateKeys "*.asc" => "ASCII-armoured key exports (gpg --export-secret-keys -a)";
    PrivateKeys "*.keytab" => "Kerberos keytabs authenticate without a password";
    PrivateKeys "*.ovpn" => "OpenVPN client profiles embed the client key";
    PrivateKeys "*_rsa" => "SSH private keys (id_rsa, deploy_rsa)";
    PrivateKeys "*_dsa" => "SSH private keys (id_dsa)";
    PrivateKeys "*_ecdsa" => "SSH private keys (id_ecdsa)";
    PrivateKeys "*_ecdsa_sk" => "SSH security-key handles (id_ecdsa_sk)";
    PrivateKeys "*_ed25519" => "SSH private keys (id_ed25519)";
    PrivateKeys "*_ed25519_sk" => "SSH security-key handles (id_ed25519_sk)";
    PrivateKeys "otr.private_key" => "Pidgin OTR private key";
    // ---- SSH and GnuPG ----
    SshGpg "~/.ssh" => "SSH keys, agent sockets, known hosts and config";
    SshGpg "~/.gnupg" => "GnuPG private keys and trust database";
    SshGpg "/etc/ssh/ssh_host_*_key" => "SSH host private keys";
    // ---- environment files ----
    EnvFiles ".env" => "dotenv files hold a project's API keys and passwords";
    EnvFiles ".env.*" => "per-environment dotenv files (.env.local, .env.production)";
    EnvFiles "*.env" => "named environment files (prod.env, secrets.env)";
    EnvFiles ".envrc" => "direnv exports, often tokens";
    EnvFiles ".dev.vars" => "Cloudflare Wrangler local secrets";
    EnvFiles "secrets.yml" => "secret files by name (Rails, Ansible, Helm values)";
    EnvFiles "secrets.yaml" => "secret files by name (Helm, SOPS inputs)";
    EnvFiles "secrets.json" => "secret files by name";
    EnvFiles "secrets.toml" => "secret files by name (Streamlit .streamlit/secrets.toml)";
    // ---- generic credential file names ----
    GenericCredentials "credentials" => "AWS, gcloud and others name their key file so";
    GenericCredentials "credentials.json" => "Google service-account and OAuth client keys, many CLIs";
    GenericCredentials "credentials.xml" => "Jenkins stored credentials";
    GenericCredentials "credentials.db" => "gcloud credential database";
    GenericCredentials "credentials-config.json" => "DBeaver saved database passwords";
    GenericCredentials "client_secret*.json" => "Google OAuth client secrets";
    GenericCredentials "*service-account*.json" => "cloud service-account keys";
    GenericCredentials ".netrc" => "machine logins and passwords for curl, git, ftp, heroku";
    GenericCredentials "_netrc" => "netrc under its other name";
    GenericCredentials ".htpasswd" => "Apache password hashes";
    GenericCredentials ".s3cfg" => "s3cmd access and secret keys";
    GenericCredentials ".boto" => "boto/gsutil keys";
    GenericCredentials ".vault-token" => "HashiCorp Vault token";
    GenericCredentials ".vault_pass*" => "Ansible Vault password files";
    GenericCredentials ".vault-pass*" => "Ansible Vault password files";
    GenericCredentials "kubeconfig" => "Kubernetes cluster credentials";
    GenericCredentials "*.kubeconfig" => "Kubernetes cluster credentials";
    // ---- cloud CLIs ----
    CloudCli "~/.aws" => "AWS CLI keys, SSO and session caches";
    CloudCli "~/.azure" => "Azure CLI token cache";
    CloudCli "~/.config/gcloud" => "gcloud credentials and access tokens";
    CloudCli "~/.config/doctl" => "DigitalOcean API token";
    CloudCli "~/.oci" => "Oracle Cloud API signing keys";
    CloudCli "~/.config/hcloud" => "Hetzner Cloud API token";
    CloudCli "~/.config/linode-cli" => "Linode API token";
    CloudCli "~/.fly" => "Fly.io access token";
    CloudCli "~/.config/heroku" => "Heroku CLI session";
    CloudCli "~/.pulumi/credentials.json" => "Pulumi access tokens";
    CloudCli "~/.terraform.d/credentials.tfrc.json" => "Terraform Cloud tokens";
    CloudCli "~/.mc/config.json" => "MinIO client access keys";
    // ---- containers and clusters ----
    Containers "~/.docker/config.json" => "Docker registry logins";
    Containers ".dockercfg" => "legacy Docker registry logins";
    Containers "~/.config/containers/auth.json" => "Podman, Buildah and Skopeo registry logins";
    Containers "/run/user/*/containers/auth.json" => "Podman's default registry login file";
    Containers "~/.kube" => "kubeconfig files: cluster certificates and tokens";
    Containers "~/.config/helm/repositories.yaml" => "Helm repository passwords";
    Containers "~/.config/helm/registry" => "Helm OCI registry logins";
    Containers "/var/run/secrets" => "Kubernetes service-account tokens mounted in pods";
    Containers "/run/secrets" => "Docker and Compose secrets";
    // ---- package registries ----
    PackageRegistries ".npmrc" => "npm registry auth tokens";
    PackageRegistries ".yarnrc.yml" => "Yarn registry auth tokens (npmAuthToken)";
    PackageRegistries ".pypirc" => "PyPI upload tokens";
    PackageRegistries "~/.cargo/credentials" => "crates.io publish token";
    PackageRegistries "~/.cargo/credentials.toml" => "crates.io publish token";
    PackageRegistries "~/.gem/credentials" => "RubyGems API key";
    PackageRegistries "~/.m2/settings.xml" => "Maven server passwords";
    PackageRegistries "~/.m2/settings-security.xml" => "Maven master password";
    PackageRegistries "~/.gradle/gradle.properties" => "Gradle repository and signing credentials";
    PackageRegistries "~/.nuget/NuGet/NuGet.Config" => "NuGet feed credentials";
    PackageRegistries "~/.composer/auth.json" => "Composer registry tokens";
    PackageRegistries "~/.config/composer/auth.json" => "Composer registry tokens";
    PackageRegistries "~/.config/pypoetry/auth.toml" => "Poetry repository credentials";
    PackageRegistries "~/.bundle/config" => "Bundler gem server credentials";
    PackageRegistries "~/.pub-cache/credentials.json" => "Dart pub publish token";
    // ---- git hosting ----
    VersionControl ".git-credentials" => "git's plain-text credential store";
    VersionControl "~/.config/git/credentials" => "git's credential store, XDG location";
    VersionControl "~/.config/gh" => "GitHub CLI OAuth token (hosts.yml)";
    VersionControl "~/.config/hub" => "hub's GitHub token";
    VersionControl "~/.config/glab-cli" => "GitLab CLI token";
    // ---- AI tools ----
    AiTools "~/.claude/.credentials.json" => "Claude Code's OAuth token";
    AiTools "~/.claude.json" => "Claude Code account state, may hold an API key";
    AiTools "~/.codex/auth.json" => "Codex CLI API key or token";
    AiTools "~/.gemini/oauth_creds.json" => "Gemini CLI OAuth token";
    AiTools "~/.config/github-copilot" => "GitHub Copilot tokens";
    AiTools "~/.cache/huggingface/token" => "Hugging Face token";
    AiTools "~/.huggingface/token" => "Hugging Face token, old location";
    AiTools "~/.kaggle/kaggle.json" => "Kaggle API key";
    // ---- database clients ----
    Databases ".pgpass" => "PostgreSQL passwords";
    Databases ".my.cnf" => "MySQL client passwords";
    Databases ".mylogin.cnf" => "MySQL login paths (obfuscated passwords)";
    Databases "~/.psql_history" => "psql history: passwords typed in ALTER ROLE, connection strings";
    Databases "~/.mysql_history" => "mysql history";
    Databases "~/.sqlite_history" => "sqlite3 history";
    Databases "~/.rediscli_history" => "redis-cli history (AUTH commands)";
    Databases "~/.dbshell" => "mongo shell history";
    Databases "~/.mongodb/mongosh" => "mongosh history and config";
    // ---- shell and REPL histories ----
    History "~/.bash_history" => "commands typed with tokens and passwords";
    History "~/.zsh_history" => "commands typed with tokens and passwords";
    History "~/.zhistory" => "zsh history, other name";
    History "~/.histfile" => "zsh history, other name";
    History "~/.sh_history" => "sh/ksh history";
    History "~/.local/share/fish/fish_history" => "fish history";
    History "~/.local/share/atuin" => "atuin's shell history database";
    History "~/.python_history" => "Python REPL history";
    History "~/.node_repl_history" => "Node REPL history";
    History "~/.irb_history" => "Ruby IRB history";
    // ---- browsers and desktop apps ----
    Browsers "~/.mozilla" => "Firefox profiles: saved logins (logins.json, key4.db), cookies";
    Browsers "~/.librewolf" => "LibreWolf profiles: saved logins, cookies";
    Browsers "~/.thunderbird" => "Thunderbird profiles: mail passwords";
    Browsers "~/.config/google-chrome" => "Chrome profiles: Login Data, Cookies, tokens";
    Browsers "~/.config/chromium" => "Chromium profiles: Login Data, Cookies";
    Browsers "~/.config/BraveSoftware" => "Brave profiles: Login Data, Cookies";
    Browsers "~/.config/vivaldi" => "Vivaldi profiles: Login Data, Cookies";
    Browsers "~/.config/microsoft-edge*" => "Edge profiles: Login Data, Cookies";
    Browsers "~/.config/opera" => "Opera profiles: Login Data, Cookies";
    Browsers "~/.config/Slack" => "Slack session cookies and tokens";
    Browsers "~/.config/discord" => "Discord session token";
    Browsers "~/.config/Signal" => "Signal message database key";
    Browsers "~/.purple/accounts.xml" => "Pidgin account passwords";
    Browsers "logins.json" => "Firefox saved logins, in any profile location";
    Browsers "key3.db" => "Firefox key database (decrypts saved logins)";
    Browsers "key4.db" => "Firefox key database (decrypts saved logins)";
    Browsers "cookies.sqlite" => "Firefox cookies (session tokens)";
    Browsers "Login Data" => "Chromium saved logins, in any profile location";
    // ---- password managers and keyrings ----
    PasswordManagers "~/.password-store" => "pass's encrypted store and its key ids";
    PasswordManagers "~/.local/share/gopass" => "gopass stores";
    PasswordManagers "~/.local/share/keyrings" => "GNOME Keyring";
    PasswordManagers "~/.local/share/kwalletd" => "KDE Wallet";
    PasswordManagers "~/.config/Bitwarden" => "Bitwarden desktop vault";
    PasswordManagers "~/.config/Bitwarden CLI" => "Bitwarden CLI vault and session";
    PasswordManagers "~/.config/op" => "1Password CLI accounts";
    PasswordManagers "*.kdbx" => "KeePass databases";
    PasswordManagers "*.kdb" => "KeePass 1 databases";
    PasswordManagers "*.psafe3" => "Password Safe databases";
    PasswordManagers "*.agilekeychain" => "1Password vaults";
    PasswordManagers "*.opvault" => "1Password vaults";
    PasswordManagers "*.keychain" => "Apple keychains";
    PasswordManagers "*.keychain-db" => "Apple keychains";
    PasswordManagers "*.kwallet" => "KDE wallets";
    // ---- infrastructure state and variables ----
    Infrastructure "*.tfstate" => "Terraform/OpenTofu state: every resource's secrets in clear";
    Infrastructure "*.tfstate.backup" => "Terraform/OpenTofu state backup";
    Infrastructure "*.tfvars" => "Terraform variables, often provider credentials";
    Infrastructure ".terraformrc" => "Terraform CLI credentials blocks";
    Infrastructure "terraform.rc" => "Terraform CLI credentials blocks";
    Infrastructure "~/.chef" => "Chef client keys and knife config";
    Infrastructure "/etc/wireguard" => "WireGuard private keys";
    Infrastructure "/etc/NetworkManager/system-connections" => "Wi-Fi keys and VPN secrets";
    // ---- cloud sync and backup ----
    CloudSync "~/.config/rclone/rclone.conf" => "rclone remotes' tokens and keys";
    CloudSync "~/.dropbox" => "Dropbox client tokens";
    CloudSync "~/.config/onedrive" => "OneDrive client refresh token";
    CloudSync "~/.config/Nextcloud" => "Nextcloud client app password";
    // ---- wallets ----
    Wallets "wallet.dat" => "Bitcoin Core (and forks) wallets";
    Wallets "~/.bitcoin" => "Bitcoin Core data and wallets";
    Wallets "~/.ethereum/keystore" => "Ethereum account keys";
    Wallets "~/.electrum/wallets" => "Electrum wallets";
    Wallets "~/.config/solana/id.json" => "Solana keypair";
    Wallets "~/.config/Exodus" => "Exodus wallet";
    // ---- system ----
    System "/etc/shadow" => "password hashes";
    System "/etc/shadow-" => "password hashes, backup";
    System "/etc/gshadow" => "group password hashes";
    System "/etc/gshadow-" => "group password hashes, backup";
    System "/etc/security/opasswd" => "old password hashes";
    System "/etc/sudoers" => "who may run what as root";
    System "/etc/sudoers.d" => "who may run what as root";
    System "/etc/ssl/private" => "system TLS private keys";
    System "/etc/pki/tls/private" => "system TLS private keys (RHEL layout)";
    System "/etc/krb5.keytab" => "the host's Kerberos keys";
    System "/root" => "root's home: its keys and histories";
    System "/proc/*/environ" => "another process's environment: tokens, API keys";
    System "/proc/*/task/*/environ" => "a thread's environment";
    System "/proc/*/mem" => "another process's memory";
    System "/proc/*/task/*/mem" => "a thread's memory";
}

/// File names that match a secret name pattern but are templates by convention: a literal path
/// whose component is one of these is not secret through that component (a glob that could match
/// both, `.env.*`, still is).
pub const NOT_SECRET_NAMES: &[(&str, &str)] = &[
    (".env.example", "dotenv template, committed without values"),
    (".env.sample", "dotenv template"),
    (".env.template", "dotenv template"),
    (".env.dist", "dotenv template (Symfony)"),
];

/// Does an environment variable name look like it holds a secret (`GITHUB_TOKEN`,
/// `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`, `DATABASE_URL`)? Case is ignored. Used for `printenv NAME`,
/// `echo $NAME` and `declare -p NAME`.
pub fn secret_env_name(name: &str) -> bool {
    const MARKS: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PWD_",
        "KEY",
        "CREDENTIAL",
        "AUTH",
        "PRIVATE",
        "COOKIE",
        "SESSION",
        "SIGNATURE",
        "DSN",
        "DATABASE_URL",
        "CONNECTION_STRING",
        "WEBHOOK",
    ];
    // `PWD_` (not `PWD`/`OLDPWD`, which are directories).
    let upper = name.to_ascii_uppercase();
    MARKS.iter().any(|m| upper.contains(m))
}

impl SecretPaths {
    /// The built-in table for `home`, plus the operator's `extra` patterns (`CMDGATE_SECRET_PATHS`,
    /// `secret_paths` in the daemon's config).
    pub fn builtin<S: AsRef<str>>(home: &str, extra: &[S]) -> SecretPaths {
        // The table itself was compiled at build time: only the home and `extra` are added.
        let extra: Vec<Comp> = extra
            .iter()
            .map(|p| Comp::Shared(std::sync::Arc::from(p.as_ref())))
            .collect();
        SecretPaths::builtin_with(home, &extra)
    }

    /// [`SecretPaths::builtin`] for every home in `homes` (the agent's `$HOME` and its home in the
    /// password database, when they differ): what is secret under one is secret under the other.
    pub fn builtin_homes<S: AsRef<str>>(homes: &[&str], extra: &[S]) -> SecretPaths {
        let mut out = SecretPaths::builtin(homes.first().copied().unwrap_or("/"), extra);
        if homes.len() > 1 {
            let mut patterns: Vec<&str> = SECRET_PATTERNS.to_vec();
            patterns.extend(extra.iter().map(AsRef::as_ref));
            for home in homes.iter().skip(1) {
                out.add_home(&patterns, home);
            }
        }
        out
    }
}

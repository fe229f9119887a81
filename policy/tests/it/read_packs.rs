//! Read packs as tables: per pack, the forms that are reads, the forms that are not (they write,
//! run code, change remote state, or are unknown), and the forms that print a secret (asked, never
//! test-run). Each line is a command as an agent writes it. docs/reads.md documents the same.

use cmdgate_policy::shell::read::{
    classify_analysis, packs, NotReadReason, Pack, PackSet, ReadPolicy, ReadVerdict,
};
use cmdgate_policy::shell::{analyze, Limits};

const HOME: &str = "/home/agent";
const PROJECT: &str = "/home/agent/proj";

fn verdict_with(cmd: &str, packs: PackSet) -> ReadVerdict {
    let mut p = ReadPolicy::new(HOME);
    p.cwd = Some(PROJECT.to_owned());
    p.project = Some(PROJECT.to_owned());
    p.packs = packs;
    classify_analysis(&analyze(cmd, &Limits::default()), &p)
}

/// Checks one pack's table: reads, refusals (not secret), secret reads.
#[track_caller]
fn table(pack: Pack, reads: &[&str], refused: &[&str], secrets: &[&str]) {
    for cmd in reads {
        assert_eq!(
            verdict_with(cmd, PackSet::all()),
            ReadVerdict::PureRead,
            "[{pack}] `{cmd}` should be a read"
        );
        // Tier 0 only adds reads: vouching for every command keeps it one (the hook does not
        // verify a map whose tier 0 could only vouch for what is already a read).
        let everything = |_: &[&str]| true;
        let mut p = ReadPolicy::new(HOME);
        p.cwd = Some(PROJECT.to_owned());
        p.project = Some(PROJECT.to_owned());
        p.extension = Some(&everything);
        assert_eq!(
            classify_analysis(&analyze(cmd, &Limits::default()), &p),
            ReadVerdict::PureRead,
            "[{pack}] `{cmd}` is no read when tier 0 vouches for it"
        );
        // Switched off, the same command is not a read, and the reason names the pack.
        match verdict_with(cmd, PackSet::all().without(pack)) {
            ReadVerdict::NotRead { reason, .. } => assert!(
                reason
                    .to_string()
                    .contains(&format!("read pack `{pack}` is switched off")),
                "[{pack}] `{cmd}` off: {reason}"
            ),
            ReadVerdict::PureRead => panic!("[{pack}] `{cmd}` is a read with its pack off"),
        }
    }
    for cmd in refused {
        match verdict_with(cmd, PackSet::all()) {
            ReadVerdict::NotRead { reason, .. } => assert!(
                !reason.reads_secret(),
                "[{pack}] `{cmd}` is refused as a secret read, expected a plain refusal: {reason}"
            ),
            ReadVerdict::PureRead => panic!("[{pack}] `{cmd}` must not be a read"),
        }
    }
    for cmd in secrets {
        match verdict_with(cmd, PackSet::all()) {
            ReadVerdict::NotRead { reason, .. } => {
                assert!(reason.reads_secret(), "[{pack}] `{cmd}`: {reason}");
                assert!(
                    matches!(reason, NotReadReason::SecretCommand { pack: p, .. } if p == pack),
                    "[{pack}] `{cmd}`: {reason:?}"
                );
            }
            ReadVerdict::PureRead => panic!("[{pack}] `{cmd}` reads a secret"),
        }
    }
}

#[test]
fn gh() {
    table(
        Pack::Gh,
        &[
            "gh pr view 12",
            "gh pr view 12 --comments",
            "gh pr view --json title,body -q .title",
            "gh pr list",
            "gh pr list --state merged --limit 5",
            "gh pr list -R cli/cli --author @me",
            "gh pr diff 12",
            "gh pr diff 12 --name-only",
            "gh pr checks 12",
            "gh pr checks --watch",
            "gh pr status",
            "gh issue list",
            "gh issue list --label bug -s open",
            "gh issue view 7",
            "gh issue status",
            "gh run list",
            "gh run list --workflow ci.yml --branch main",
            "gh run view 123",
            "gh run view 123 --log-failed",
            "gh run view 123 --log",
            "gh run view --job 456",
            "gh run watch 123",
            "gh workflow list",
            "gh workflow view ci.yml --yaml",
            "gh repo view",
            "gh repo view cli/cli --json name",
            "gh repo list octo --limit 10",
            "gh release list",
            "gh release view v1.2.0",
            "gh search repos cmdgate",
            "gh search issues --state open bug",
            "gh search code 'fn main'",
            "gh status",
            "gh auth status",
            "gh api repos/cli/cli",
            "gh api repos/cli/cli/pulls --paginate",
            "gh api -X GET search/issues",
            "gh api --method GET repos/o/r/actions/runs --jq '.workflow_runs[0].status'",
            "gh api repos/o/r/commits/HEAD/check-runs -q '.check_runs[].name'",
            "gh label list",
            "gh cache list",
            "gh secret list",
            "gh variable list",
            "gh variable get NAME",
            "gh ruleset list",
            "gh gist list",
            "gh gist view abc123",
            "gh extension list",
            "gh browse --no-browser",
            "gh --version",
            "gh config get editor",
            "gh run list | head -3",
        ],
        &[
            "gh pr create --fill",
            "gh pr merge 12",
            "gh pr checkout 12",
            "gh pr comment 12 -b hi",
            "gh pr close 12",
            "gh pr view 12 --web",
            "gh pr view -w",
            "gh issue create -t x",
            "gh issue close 7",
            "gh issue view 7 --web",
            "gh run rerun 123",
            "gh run cancel 123",
            "gh run download 123",
            "gh run delete 123",
            "gh workflow run ci.yml",
            "gh workflow enable ci.yml",
            "gh repo clone cli/cli",
            "gh repo create x",
            "gh repo delete x",
            "gh release create v1",
            "gh release download v1",
            "gh api -X POST repos/o/r/issues",
            "gh api --method DELETE repos/o/r",
            "gh api repos/o/r/issues -f title=x",
            "gh api repos/o/r/issues -F title=x",
            "gh api repos/o/r/issues --raw-field title=x",
            "gh api repos/o/r/issues --input body.json",
            "gh api graphql -f query='{viewer{login}}'",
            "gh api graphql",
            "gh secret set X",
            "gh variable set X",
            "gh extension install o/gh-x",
            "gh my-extension",
            "gh browse",
            "gh alias set co 'pr checkout'",
            "gh --bogus pr list",
            "gh pr view $N",
            "gh codespace ssh",
            "gh auth login",
            "gh auth logout",
            "gh label create x",
        ],
        &[
            "gh auth token",
            "gh auth token --hostname github.com",
            "gh auth status --show-token",
            "gh auth status -t",
            "gh config get oauth_token",
        ],
    );
}

#[test]
fn git_remote() {
    table(
        Pack::GitRemote,
        &[
            "git ls-remote origin",
            "git ls-remote --tags origin",
            "git ls-remote --heads https://github.com/cli/cli",
            "git ls-remote",
            "git remote show origin",
            "git remote show -n origin",
        ],
        &[
            "git ls-remote --upload-pack=touch origin",
            "git ls-remote -u 'touch x' origin",
            "git ls-remote 'ext::sh -c touch% /tmp/x'",
            "git remote show --bogus origin",
            "git fetch origin",
            "git pull",
            "git push origin main",
            "git remote add x https://e.com",
            "git remote set-url origin https://e.com",
        ],
        &[],
    );
    // Local git reads stay the built-in list's (the pack does not claim them).
    for cmd in ["git status", "git log --oneline -3", "git remote -v"] {
        assert_eq!(
            verdict_with(cmd, PackSet::none()),
            ReadVerdict::PureRead,
            "{cmd}"
        );
    }
}

#[test]
fn kubectl() {
    table(
        Pack::Kubectl,
        &[
            "kubectl get pods",
            "kubectl get pods -A",
            "kubectl get pods -n kube-system -o wide",
            "kubectl get pods -o yaml",
            "kubectl get deploy,svc -o json",
            "kubectl get pod web-0 -o jsonpath='{.status.phase}'",
            "kubectl get nodes --show-labels",
            "kubectl get events --sort-by=.lastTimestamp",
            "kubectl get secrets",
            "kubectl get secrets -n app",
            "kubectl get secret -o name",
            "kubectl get pods -w",
            "kubectl -n app get pods",
            "kubectl --context prod get pods",
            "kubectl --kubeconfig /home/agent/proj/kc.yaml get ns",
            "kubectl describe pod web-0",
            "kubectl describe secret db",
            "kubectl describe nodes",
            "kubectl logs web-0",
            "kubectl logs -f web-0 -c app",
            "kubectl logs deploy/web --since=1h --tail=100",
            "kubectl logs -l app=web --all-containers",
            "kubectl top pods",
            "kubectl top nodes",
            "kubectl explain pods.spec",
            "kubectl api-resources",
            "kubectl api-versions",
            "kubectl version",
            "kubectl cluster-info",
            "kubectl auth can-i create pods",
            "kubectl auth whoami",
            "kubectl rollout status deploy/web",
            "kubectl rollout history deploy/web",
            "kubectl config view",
            "kubectl config get-contexts",
            "kubectl config current-context",
            "kubectl events -n app",
            "oc get pods",
        ],
        &[
            "kubectl exec -it web-0 -- sh",
            "kubectl exec web-0 -- cat /etc/passwd",
            "kubectl cp web-0:/tmp/x x",
            "kubectl port-forward svc/web 8080:80",
            "kubectl proxy",
            "kubectl attach web-0",
            "kubectl debug web-0 --image=busybox",
            "kubectl run x --image=busybox",
            "kubectl apply -f x.yaml",
            "kubectl create ns x",
            "kubectl delete pod web-0",
            "kubectl edit deploy web",
            "kubectl patch deploy web -p '{}'",
            "kubectl scale deploy web --replicas=0",
            "kubectl rollout restart deploy/web",
            "kubectl rollout undo deploy/web",
            "kubectl label pod web-0 x=y",
            "kubectl annotate pod web-0 x=y",
            "kubectl drain node-1",
            "kubectl cordon node-1",
            "kubectl config use-context prod",
            "kubectl config set-context x",
            "kubectl cluster-info dump",
            "kubectl cluster-info dump --output-directory=/tmp/d",
            "kubectl my-plugin",
            "kubectl --insecure-skip-tls-verify exec get",
            "kubectl --bogus get pods",
            "kubectl get pods -n $NS",
        ],
        &[
            "kubectl get secret db -o yaml",
            "kubectl get secrets -o json",
            "kubectl get secret/db -o jsonpath='{.data.password}'",
            "kubectl get secrets,configmaps -o yaml",
            "kubectl -n app get secret db -o go-template='{{.data}}'",
            "kubectl get --raw /api/v1/namespaces/app/secrets/db",
            "kubectl config view --raw",
        ],
    );
}

#[test]
fn helm() {
    table(
        Pack::Helm,
        &[
            "helm list",
            "helm list -A",
            "helm ls -n app",
            "helm status web",
            "helm status web -o json",
            "helm history web",
            "helm get notes web",
            "helm get hooks web",
            "helm get metadata web",
            "helm show values bitnami/nginx",
            "helm show chart ./chart",
            "helm search repo nginx",
            "helm search hub nginx",
            "helm repo list",
            "helm dependency list ./chart",
            "helm plugin list",
            "helm template web ./chart",
            "helm template web ./chart -f values.yaml",
            "helm lint ./chart",
            "helm version",
            "helm env",
            "helm --kube-context prod list",
        ],
        &[
            "helm install web ./chart",
            "helm upgrade web ./chart",
            "helm uninstall web",
            "helm rollback web 1",
            "helm repo add bitnami https://charts.bitnami.com/bitnami",
            "helm repo update",
            "helm dependency update ./chart",
            "helm dependency build ./chart",
            "helm template web ./chart --output-dir out",
            "helm template web ./chart --post-renderer ./x.sh",
            "helm plugin install https://e.com/p",
            "helm diff upgrade web ./chart",
            "helm pull bitnami/nginx",
            "helm push chart.tgz oci://r",
            "helm --bogus list",
        ],
        &[
            "helm get values web",
            "helm get values web -a",
            "helm get manifest web",
            "helm get all web",
        ],
    );
}

#[test]
fn docker() {
    table(
        Pack::Docker,
        &[
            "docker ps",
            "docker ps -a",
            "docker ps --format '{{.Names}}'",
            "docker images",
            "docker image ls",
            "docker image inspect nginx",
            "docker image history nginx",
            "docker logs web",
            "docker logs -f --tail 100 web",
            "docker logs --since 10m web",
            "docker container ls",
            "docker container logs web",
            "docker container top web",
            "docker inspect -f '{{.State.Status}}' web",
            "docker inspect --format '{{.NetworkSettings.IPAddress}}' web",
            "docker container inspect -f '{{.State.Health.Status}}' web",
            "docker version",
            "docker info",
            "docker top web",
            "docker stats --no-stream",
            "docker port web",
            "docker diff web",
            "docker history nginx",
            "docker network ls",
            "docker network inspect bridge",
            "docker volume ls",
            "docker volume inspect data",
            "docker system df",
            "docker context ls",
            "docker context show",
            "docker compose ps",
            "docker compose logs web",
            "docker compose ls",
            "docker compose images",
            "docker buildx ls",
            "docker manifest inspect nginx",
            "docker --context prod ps",
            "docker -H ssh://h ps",
            "docker search nginx",
            "podman ps",
            "podman images",
            "podman logs web",
            "podman pod ls",
        ],
        &[
            "docker run --rm alpine true",
            "docker run -v /:/host alpine cat /host/etc/shadow",
            "docker exec -it web sh",
            "docker cp web:/etc/passwd .",
            "docker build .",
            "docker push r/x",
            "docker pull nginx",
            "docker rm web",
            "docker rmi nginx",
            "docker stop web",
            "docker kill web",
            "docker start web",
            "docker restart web",
            "docker commit web x",
            "docker save nginx",
            "docker export web",
            "docker load -i x.tar",
            "docker logout",
            "docker network create x",
            "docker volume rm data",
            "docker system prune -f",
            "docker compose up -d",
            "docker compose down",
            "docker compose exec web sh",
            "docker compose run web sh",
            "docker context use prod",
            "docker my-plugin",
            "docker --bogus ps",
            "podman run alpine",
            "podman machine start",
        ],
        &[
            "docker login",
            "docker login -u me registry.example.com",
            "docker inspect web",
            "docker container inspect web",
            "docker inspect -f '{{.Config.Env}}' web",
            "docker inspect --format '{{json .}}' web",
            "docker compose config",
            "podman inspect web",
        ],
    );
}

#[test]
fn aws() {
    table(
        Pack::Aws,
        &[
            "aws s3 ls",
            "aws s3 ls s3://bucket/prefix/ --recursive",
            "aws sts get-caller-identity",
            "aws ec2 describe-instances",
            "aws ec2 describe-instances --filters Name=tag:env,Values=prod --query 'Reservations[].Instances[].InstanceId'",
            "aws ec2 describe-security-groups --output table",
            "aws --profile prod --region eu-west-1 ec2 describe-vpcs",
            "aws iam list-users",
            "aws iam get-user",
            "aws iam list-access-keys",
            "aws lambda list-functions",
            "aws logs describe-log-groups",
            "aws logs tail /aws/lambda/x --follow",
            "aws logs get-log-events --log-group-name g --log-stream-name s",
            "aws cloudformation describe-stacks --stack-name web",
            "aws cloudformation list-stacks",
            "aws ecs list-clusters",
            "aws ecs describe-services --cluster c --services s",
            "aws eks list-clusters",
            "aws eks describe-cluster --name c",
            "aws rds describe-db-instances",
            "aws ssm get-parameter --name /app/flag",
            "aws s3api list-buckets",
            "aws s3api get-bucket-policy --bucket b",
            "aws secretsmanager list-secrets",
            "aws secretsmanager describe-secret --secret-id db",
            "aws kms list-keys",
            "aws ec2 wait instance-running --instance-ids i-1",
            "aws configure list",
            "aws configure list-profiles",
            "aws --version",
            "aws ec2 help",
            "aws dynamodb describe-table --table-name t --output json",
        ],
        &[
            "aws s3 cp x s3://b/x",
            "aws s3 cp s3://b/x .",
            "aws s3 sync . s3://b",
            "aws s3 rm s3://b/x",
            "aws s3 mv s3://b/x s3://b/y",
            "aws s3 mb s3://b",
            "aws s3 rb s3://b",
            "aws s3 presign s3://b/x",
            "aws s3api get-object --bucket b --key k out.bin",
            "aws s3api put-object --bucket b --key k",
            "aws ec2 run-instances --image-id ami-1",
            "aws ec2 terminate-instances --instance-ids i-1",
            "aws ec2 start-instances --instance-ids i-1",
            "aws iam create-user --user-name x",
            "aws iam create-access-key",
            "aws lambda invoke --function-name f out.json",
            "aws lambda update-function-code --function-name f",
            "aws cloudformation deploy --stack-name s",
            "aws ssm send-command --document-name x",
            "aws ssm start-session --target i-1",
            "aws ecs execute-command --cluster c",
            "aws dynamodb put-item --table-name t",
            "aws dynamodb scan --table-name t",
            "aws sqs receive-message --queue-url u",
            "aws ec2 describe-instances --output out.json",
            "aws --bogus ec2 describe-instances",
            "aws s3 ls $BUCKET",
            "aws configure set region eu-west-1",
            "aws sso login",
        ],
        &[
            "aws secretsmanager get-secret-value --secret-id db",
            "aws secretsmanager batch-get-secret-value --secret-id-list a b",
            "aws ssm get-parameter --name /app/db --with-decryption",
            "aws ssm get-parameters --names a b --with-decryption",
            "aws ssm get-parameters-by-path --path /app",
            "aws sts get-session-token",
            "aws sts assume-role --role-arn arn:x --role-session-name s",
            "aws ecr get-login-password",
            "aws ecr get-authorization-token",
            "aws codeartifact get-authorization-token --domain d",
            "aws eks get-token --cluster-name c",
            "aws rds generate-db-auth-token --hostname h --port 5432 --username u",
            "aws ec2 get-password-data --instance-id i-1",
            "aws lambda get-function --function-name f",
            "aws lambda get-function-configuration --function-name f",
            "aws configure get aws_secret_access_key",
            "aws configure export-credentials",
            "aws apigateway get-api-keys --include-values",
            "aws ec2 describe-instances --debug",
        ],
    );
}

#[test]
fn gcloud() {
    table(
        Pack::Gcloud,
        &[
            "gcloud projects list",
            "gcloud compute instances list",
            "gcloud compute instances list --filter=status=RUNNING --format=json",
            "gcloud compute instances describe vm-1 --zone europe-west1-b",
            "gcloud container clusters list",
            "gcloud container clusters describe c --region r",
            "gcloud run services list",
            "gcloud run services describe web --region r",
            "gcloud sql instances list",
            "gcloud iam service-accounts list",
            "gcloud projects get-iam-policy p",
            "gcloud config list",
            "gcloud config get-value project",
            "gcloud config configurations list",
            "gcloud auth list",
            "gcloud info",
            "gcloud version",
            "gcloud logging read 'severity>=ERROR' --limit 10",
            "gcloud components list",
            "gcloud beta run services list",
            "gcloud secrets list",
            "gcloud secrets versions list db",
            "gcloud storage ls gs://b",
        ],
        &[
            "gcloud compute instances create vm-1",
            "gcloud compute instances delete vm-1",
            "gcloud compute ssh vm-1",
            "gcloud compute scp x vm-1:",
            "gcloud run deploy web --source .",
            "gcloud config set project p",
            "gcloud auth login",
            "gcloud auth activate-service-account --key-file k.json",
            "gcloud projects delete p",
            "gcloud storage cp x gs://b",
            "gcloud storage rm gs://b/x",
            "gcloud compute instances delete list",
            "gcloud builds submit",
            "gcloud --flags-file=f.yaml compute instances list",
            "gcloud compute instances list --zone $Z",
        ],
        &[
            "gcloud auth print-access-token",
            "gcloud auth print-identity-token",
            "gcloud auth application-default print-access-token",
            "gcloud secrets versions access latest --secret db",
            "gcloud container clusters get-credentials c --region r",
            "gcloud iam service-accounts keys create k.json --iam-account a",
            "gcloud config config-helper --format=json",
            "gcloud projects list --log-http",
        ],
    );
}

#[test]
fn az() {
    table(
        Pack::Az,
        &[
            "az account show",
            "az account list -o table",
            "az group list",
            "az vm list -g rg",
            "az vm show -g rg -n vm1",
            "az resource list --resource-group rg",
            "az aks list",
            "az aks show -g rg -n k",
            "az storage account list",
            "az keyvault list",
            "az keyvault secret list --vault-name v",
            "az webapp list",
            "az monitor activity-log list",
            "az version",
            "az --version",
            "az acr repository list --name r",
            "az network vnet list -o tsv",
            "az account list-locations",
            "az group exists -n rg",
        ],
        &[
            "az vm create -g rg -n vm1",
            "az vm delete -g rg -n vm1",
            "az vm start -g rg -n vm1",
            "az group delete -n rg",
            "az login",
            "az account set -s sub",
            "az aks get-upgrades -g rg -n k",
            "az webapp deploy -g rg -n w",
            "az vm run-command invoke -g rg -n vm1",
            "az storage blob upload -f x -c c",
            "az extension add -n x",
            "az vm list -o out.json",
        ],
        &[
            "az account get-access-token",
            "az account get-access-token --resource https://management.azure.com",
            "az keyvault secret show --vault-name v -n db",
            "az keyvault secret download --vault-name v -n db -f x",
            "az storage account keys list -n sa",
            "az storage account show-connection-string -n sa",
            "az cosmosdb keys list -n c -g rg",
            "az acr credential show -n r",
            "az aks get-credentials -g rg -n k",
            "az webapp config appsettings list -g rg -n w",
            "az vm list --debug",
        ],
    );
}

#[test]
fn terraform() {
    table(
        Pack::Terraform,
        &[
            "terraform show",
            "terraform show plan.tfplan",
            "terraform validate",
            "terraform validate -json",
            "terraform version",
            "terraform -version",
            "terraform fmt -check",
            "terraform fmt -check -diff -recursive",
            "terraform providers",
            "terraform providers schema -json",
            "terraform graph",
            "terraform output",
            "terraform output vpc_id",
            "terraform state list",
            "terraform workspace list",
            "terraform workspace show",
            "terraform -chdir=infra validate",
            "tofu show",
            "tofu validate",
        ],
        &[
            "terraform plan",
            "terraform apply",
            "terraform apply -auto-approve",
            "terraform destroy",
            "terraform init",
            "terraform fmt",
            "terraform import a.b id",
            "terraform state rm a.b",
            "terraform state mv a b",
            "terraform state push x",
            "terraform taint a.b",
            "terraform console",
            "terraform workspace new x",
            "terraform workspace select x",
            "terraform providers lock",
            "terraform providers mirror d",
            "terraform get",
            "terraform refresh",
            "tofu apply",
        ],
        &[
            "terraform show -json",
            "terraform output -json",
            "terraform output -raw db_password",
            "terraform state pull",
            "terraform state show aws_db_instance.main",
            "tofu state pull",
        ],
    );
}

#[test]
fn npm() {
    table(
        Pack::Npm,
        &[
            "npm view react",
            "npm view react versions --json",
            "npm info lodash",
            "npm show express version",
            "npm ls",
            "npm ls --depth 0",
            "npm ls --all",
            "npm list react",
            "npm outdated",
            "npm explain react",
            "npm why react",
            "npm audit",
            "npm audit signatures",
            "npm fund",
            "npm search cmdgate",
            "npm root -g",
            "npm prefix",
            "npm ping",
            "npm whoami",
            "npm help install",
            "npm config get registry",
            "npm config list",
            "npm --version",
            "npm -v",
            "npm version",
            "npm query ':root > *'",
            "pnpm list",
            "pnpm ls --depth 0",
            "pnpm outdated",
            "pnpm why react",
            "pnpm audit",
            "pnpm licenses list",
            "pnpm store path",
            "pnpm view react",
            "pnpm --version",
            "yarn info react",
            "yarn list --depth=0",
            "yarn why react",
            "yarn outdated",
            "yarn workspaces list",
            "yarn npm info react",
            "yarn --version",
            "yarn config get npmRegistryServer",
        ],
        &[
            "npm install",
            "npm i react",
            "npm ci",
            "npm run build",
            "npm test",
            "npm start",
            "npm exec x",
            "npm publish",
            "npm audit fix",
            "npm version patch",
            "npm pack",
            "npm link",
            "npm uninstall x",
            "npm update",
            "npm config set registry x",
            "npm docs react",
            "npm init",
            "npm --bogus ls",
            "pnpm install",
            "pnpm add react",
            "pnpm build",
            "pnpm dlx x",
            "pnpm audit --fix",
            "pnpm exec x",
            "yarn",
            "yarn install",
            "yarn add react",
            "yarn build",
            "yarn dlx x",
        ],
        &[
            "npm config get //registry.npmjs.org/:_authToken",
            "npm token list",
            "pnpm config get _authToken",
            "yarn config get npmAuthToken",
        ],
    );
}

#[test]
fn pip() {
    table(
        Pack::Pip,
        &[
            "pip show requests",
            "pip list",
            "pip list --outdated",
            "pip list --format json",
            "pip freeze",
            "pip check",
            "pip inspect",
            "pip index versions requests",
            "pip cache dir",
            "pip --version",
            "pip3 show requests",
            "pip3 list",
            "uv pip list",
            "uv pip show requests",
            "uv pip freeze",
            "uv pip tree",
            "uv tree --frozen",
            "uv tree --locked",
            "uv python list",
            "uv python find",
            "uv tool list",
            "uv cache dir",
            "uv --version",
            "uv version",
        ],
        &[
            "pip install requests",
            "pip install -r requirements.txt",
            "pip uninstall requests",
            "pip download requests",
            "pip wheel .",
            "pip cache purge",
            "pip3 install x",
            "uv pip install requests",
            "uv pip sync r.txt",
            "uv sync",
            "uv lock",
            "uv add requests",
            "uv run pytest",
            "uv tree",
            "uv tool install ruff",
            "uv python install 3.12",
            "uv version --bump patch",
            "uvx ruff",
            "pip --bogus list",
        ],
        &["pip config list", "pip config get global.index-url"],
    );
}

#[test]
fn cargo() {
    table(
        Pack::Cargo,
        &[
            "cargo metadata --no-deps",
            "cargo metadata --format-version 1 --no-deps",
            "cargo metadata --locked",
            "cargo tree --locked",
            "cargo tree --frozen -e features",
            "cargo tree --locked -i serde",
            "cargo tree --locked -p cmdgate-policy --depth 1",
            "cargo --version",
            "cargo -V",
            "cargo --list",
            "cargo version",
            "cargo pkgid",
            "cargo locate-project",
            "cargo verify-project",
            "cargo search serde",
            "cargo search serde --limit 5",
            "cargo info serde",
            "cargo help build",
            "cargo --locked tree",
        ],
        &[
            "cargo build",
            "cargo test",
            "cargo run",
            "cargo check",
            "cargo clippy",
            "cargo install x",
            "cargo publish",
            "cargo update",
            "cargo fetch",
            "cargo add serde",
            "cargo fmt",
            "cargo tree",
            "cargo metadata",
            "cargo +nightly tree --locked",
            "cargo --config build.rustc-wrapper=x tree --locked",
            "cargo -Zunstable-options tree --locked",
            "cargo my-plugin",
            "cargo --bogus tree --locked",
            "cargo tree --locked -p $P",
        ],
        &[],
    );
}

#[test]
fn brew() {
    table(
        Pack::Brew,
        &[
            "brew info git",
            "brew list",
            "brew list --versions",
            "brew search ripgrep",
            "brew outdated",
            "brew deps git",
            "brew uses --installed openssl",
            "brew leaves",
            "brew config",
            "brew doctor",
            "brew desc git",
            "brew cat git",
            "brew log git",
            "brew tap",
            "brew services list",
            "brew --version",
            "brew --prefix",
            "brew --prefix openssl",
        ],
        &[
            "brew install git",
            "brew upgrade",
            "brew update",
            "brew uninstall git",
            "brew tap homebrew/cask",
            "brew services start postgresql",
            "brew cleanup",
            "brew link git",
            "brew home git",
            "brew edit git",
            "brew bundle",
        ],
        &[],
    );
}

#[test]
fn systemd() {
    table(
        Pack::Systemd,
        &[
            "systemctl status nginx",
            "systemctl status",
            "systemctl --user status cmdgated",
            "systemctl list-units",
            "systemctl list-units --failed --no-pager",
            "systemctl list-unit-files --state=enabled",
            "systemctl list-timers --all",
            "systemctl is-active nginx",
            "systemctl is-enabled nginx",
            "systemctl is-failed nginx",
            "systemctl cat nginx",
            "systemctl show nginx -p ActiveState",
            "systemctl show --property=MainPID nginx",
            "systemctl list-dependencies nginx",
            "systemctl",
            "systemctl --version",
            "journalctl",
            "journalctl -u nginx",
            "journalctl -u nginx -n 100 --no-pager",
            "journalctl -f -u cmdgated",
            "journalctl --since '1 hour ago' -p err",
            "journalctl -b -1",
            "journalctl --user -u cmdgated -o json",
            "journalctl --disk-usage",
            "journalctl --list-boots",
        ],
        &[
            "systemctl start nginx",
            "systemctl stop nginx",
            "systemctl restart nginx",
            "systemctl enable nginx",
            "systemctl disable nginx",
            "systemctl daemon-reload",
            "systemctl edit nginx",
            "systemctl mask nginx",
            "systemctl kill nginx",
            "systemctl reboot",
            "systemctl -H host status nginx",
            "systemctl --host=h status",
            "journalctl --vacuum-size=100M",
            "journalctl --vacuum-time=1d",
            "journalctl --rotate",
            "journalctl --flush",
            "journalctl --setup-keys",
            "journalctl --cursor-file=/tmp/c",
        ],
        &[
            "systemctl show nginx",
            "systemctl show nginx -p Environment",
        ],
    );
}

#[test]
fn packs_are_named_and_switchable() {
    for p in Pack::ALL {
        assert_eq!(Pack::parse(p.name()), Some(*p));
        assert!(!p.commands().is_empty());
    }
    let off = PackSet::all().without_named("aws, kubectl").unwrap();
    assert!(!off.contains(Pack::Aws) && !off.contains(Pack::Kubectl) && off.contains(Pack::Gh));
    let e = PackSet::all().without_named("awz").unwrap_err();
    assert!(e.contains("unknown read pack `awz`"), "{e}");
    // Each verdict names its rule, for `explain` and the audit.
    assert!(matches!(
        packs::judge("kubectl", &["get", "pods"]),
        Some((
            Pack::Kubectl,
            cmdgate_policy::shell::read::PackVerdict::Read {
                rule: "kubectl get"
            }
        ))
    ));
    // A secret form is never a read, even when tier 0 vouches for every `gh` command.
    let mut p = ReadPolicy::new(HOME);
    let everything = |_: &[&str]| true;
    p.extension = Some(&everything);
    let v = classify_analysis(&analyze("gh auth token", &Limits::default()), &p);
    assert!(matches!(v, ReadVerdict::NotRead { reason, .. } if reason.reads_secret()));
}

#[test]
fn pack_reads_still_refuse_secret_paths_and_writing_redirections() {
    for cmd in [
        "kubectl --kubeconfig ~/.kube/config get pods",
        "gh api repos/o/r > out.json",
        "docker logs web > ~/.ssh/authorized_keys",
        "aws s3 ls --ca-bundle /home/agent/.aws/ca.pem",
    ] {
        assert_ne!(
            verdict_with(cmd, PackSet::all()),
            ReadVerdict::PureRead,
            "{cmd}"
        );
    }
    // Pipes into other reads are fine.
    assert_eq!(
        verdict_with(
            "kubectl get pods -o json | jq '.items[].metadata.name'",
            PackSet::all()
        ),
        ReadVerdict::PureRead
    );
}

#[test]
fn the_tier_map_switches_packs_off_for_its_project() {
    use cmdgate_policy::tiermap::parse;
    let map = parse(
        "---\nrevision: 3\nread-packs-off: aws, docker\n---\n\n## Tier 0 — read\n\n- `pwd`\n",
    )
    .expect("parses");
    let on = map.read_packs(PackSet::all());
    assert!(!on.contains(Pack::Aws) && !on.contains(Pack::Docker) && on.contains(Pack::Gh));
    assert!(matches!(
        verdict_with("aws s3 ls", on),
        ReadVerdict::NotRead { .. }
    ));
    assert_eq!(verdict_with("gh pr list", on), ReadVerdict::PureRead);
    let bad = parse("---\nrevision: 3\nread-packs-off: awz\n---\n").unwrap_err();
    assert!(
        bad.iter()
            .any(|d| d.to_string().contains("unknown read pack `awz`")),
        "{bad:?}"
    );
}

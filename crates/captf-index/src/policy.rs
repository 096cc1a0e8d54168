//! Terraform* objects and CAPI Clusters: who the objects are, and their
//! effective Job timeouts, resolved as CAPTF resolves them.
//!
//! Objects are keyed by [`LockKey`] (namespace, state suffix), the key their
//! lock Lease has too. TerraformClusters are also indexed by name and by
//! their `cluster.x-k8s.io/cluster-name` label, CAPI Clusters by name, so
//! inheritance is a few hash lookups.

use std::collections::HashMap;

use super::entries::{CapiCluster, TerraformCluster, TfObject};
use super::keys::{LockKey, ObjectKey};
use captf_core::kind::Kind;
use captf_core::suffix::state_suffix;
use captf_core::timeouts::{
    resolve, terraform_cluster_name, CapiClusterLookup, ClusterPolicies, Resolved,
};

/// The policy sub-index.
#[derive(Debug, Default)]
pub struct PolicyIndex {
    objects: HashMap<LockKey, TfObject>,
    clusters: HashMap<ObjectKey, TerraformCluster>,
    /// TerraformCluster names per (namespace, cluster-name label).
    clusters_by_label: HashMap<ObjectKey, Vec<String>>,
    capi: HashMap<ObjectKey, CapiCluster>,
    /// Machines' and pools' lock keys per (namespace, cluster-name label):
    /// what a change of their TerraformCluster or CAPI Cluster reaches.
    inheritors_by_label: HashMap<ObjectKey, Vec<LockKey>>,
}

impl PolicyIndex {
    /// Room for `n` Terraform* objects in all (see
    /// [`super::locks::LockIndex::reserve_total`]).
    pub fn reserve_objects(&mut self, n: usize) {
        self.objects.reserve(n.saturating_sub(self.objects.len()));
    }

    /// Stores a Terraform* object; returns its lock key.
    /// `lock` is the object's lock key (its suffix, computed by the caller
    /// once: a sha256).
    pub fn apply_object(&mut self, lock: LockKey, key: ObjectKey, obj: TfObject) -> LockKey {
        self.remove_object_at(&lock, obj.kind, &key);
        if obj.kind != Kind::TerraformCluster {
            if let Some(label) = &obj.cluster_label {
                self.inheritors_by_label
                    .entry(ObjectKey::new(&key.namespace, label))
                    .or_default()
                    .push(lock.clone());
            }
        }
        if let Some(tc) = &obj.cluster {
            if let Some(label) = &obj.cluster_label {
                self.clusters_by_label
                    .entry(ObjectKey::new(&key.namespace, label))
                    .or_default()
                    .push(key.name.clone());
            }
            self.clusters.insert(
                key,
                TerraformCluster {
                    cluster_label: obj.cluster_label.clone(),
                    policies: *tc,
                },
            );
        }
        self.objects.insert(lock.clone(), obj);
        lock
    }

    /// Removes a Terraform* object; returns its lock key.
    pub fn remove_object(&mut self, kind: Kind, key: &ObjectKey) -> LockKey {
        let lock = LockKey::new(
            &key.namespace,
            state_suffix(&key.namespace, kind, &key.name),
        );
        self.remove_object_at(&lock, kind, key);
        lock
    }

    /// Removes the Terraform* object of lock key `lock`.
    fn remove_object_at(&mut self, lock: &LockKey, kind: Kind, key: &ObjectKey) {
        let old = self.objects.remove(lock);
        if let Some(label) = old.as_ref().and_then(|o| o.cluster_label.as_ref()) {
            if kind != Kind::TerraformCluster {
                let k = ObjectKey::new(&key.namespace, label);
                if let Some(locks) = self.inheritors_by_label.get_mut(&k) {
                    locks.retain(|l| l != lock);
                    if locks.is_empty() {
                        self.inheritors_by_label.remove(&k);
                    }
                }
            }
        }
        if kind == Kind::TerraformCluster {
            if let Some(old) = self.clusters.remove(key) {
                self.unindex_label(key, old.cluster_label.as_deref());
            }
        }
    }

    fn unindex_label(&mut self, key: &ObjectKey, label: Option<&str>) {
        let Some(label) = label else { return };
        let k = ObjectKey::new(&key.namespace, label);
        if let Some(names) = self.clusters_by_label.get_mut(&k) {
            names.retain(|n| *n != key.name);
            if names.is_empty() {
                self.clusters_by_label.remove(&k);
            }
        }
    }

    /// Keys of the objects of `kind` in `scope` (all namespaces when None).
    pub fn object_keys(&self, kind: Kind, scope: Option<&str>) -> Vec<ObjectKey> {
        self.objects
            .iter()
            .filter(|(k, o)| o.kind == kind && scope.is_none_or(|s| s == k.namespace))
            .map(|(k, o)| ObjectKey::new(&k.namespace, &o.name))
            .collect()
    }

    /// Stores a CAPI Cluster; returns whether it changed.
    pub fn apply_capi(&mut self, key: ObjectKey, cluster: CapiCluster) -> bool {
        self.capi.insert(key, cluster.clone()) != Some(cluster)
    }

    /// Removes a CAPI Cluster; returns whether it was kept.
    pub fn remove_capi(&mut self, key: &ObjectKey) -> bool {
        self.capi.remove(key).is_some()
    }

    /// Keys of the CAPI Clusters in `scope`.
    pub fn capi_keys(&self, scope: Option<&str>) -> Vec<ObjectKey> {
        self.capi
            .keys()
            .filter(|k| scope.is_none_or(|s| s == k.namespace))
            .cloned()
            .collect()
    }

    /// The machines and pools whose effective timeouts may follow the
    /// TerraformCluster `name` of `namespace`, labelled `label`: those
    /// labelled like it (the orphaned-cluster lookup) and those labelled
    /// with the name of a CAPI Cluster whose infrastructureRef names it.
    /// A change of that TerraformCluster's policies, label or existence
    /// reaches these alone.
    pub fn inheritors_of_terraform_cluster(
        &self,
        namespace: &str,
        name: &str,
        label: Option<&str>,
    ) -> Vec<LockKey> {
        let mut labels: Vec<&str> = label.into_iter().collect();
        labels.extend(
            self.capi
                .iter()
                .filter(|(k, c)| k.namespace == namespace && c.infra_ref.name == name)
                .map(|(k, _)| k.name.as_str()),
        );
        labels
            .into_iter()
            .flat_map(|l| self.inheritors_of_label(namespace, l))
            .collect()
    }

    /// The machines and pools labelled with cluster name `label` in
    /// `namespace`: what a change of the CAPI Cluster of that name reaches.
    pub fn inheritors_of_label(&self, namespace: &str, label: &str) -> Vec<LockKey> {
        self.inheritors_by_label
            .get(&ObjectKey::new(namespace, label))
            .cloned()
            .unwrap_or_default()
    }

    /// The object whose lock has this key.
    pub fn object(&self, key: &LockKey) -> Option<&TfObject> {
        self.objects.get(key)
    }

    /// Every object with its lock key.
    pub fn objects(&self) -> impl Iterator<Item = (&LockKey, &TfObject)> {
        self.objects.iter()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// No object known.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Effective timeouts of an object and where each came from, resolved
    /// on every call from the current TerraformCluster, CAPI Cluster and
    /// object, so a change to any of them shows at once.
    pub fn resolve_for(&self, namespace: &str, obj: &TfObject) -> Resolved {
        let cluster = if obj.kind == Kind::TerraformCluster {
            None
        } else {
            self.cluster_policies_for(namespace, obj.cluster_label.as_deref())
        };
        resolve(obj.kind, obj.jobs.as_ref(), cluster)
    }

    fn cluster_policies_for(
        &self,
        namespace: &str,
        label: Option<&str>,
    ) -> Option<&ClusterPolicies> {
        let label_key = label.map(|l| ObjectKey::new(namespace, l));
        let capi = match label_key.as_ref().and_then(|k| self.capi.get(k)) {
            Some(c) => CapiClusterLookup::Found(&c.infra_ref),
            None => CapiClusterLookup::NotFound,
        };
        let candidates: Vec<&str> = label_key
            .as_ref()
            .and_then(|k| self.clusters_by_label.get(k))
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let tc_name = terraform_cluster_name(label, capi, &candidates)?;
        self.clusters
            .get(&ObjectKey::new(namespace, tc_name))
            .map(|tc| &tc.policies)
    }
}

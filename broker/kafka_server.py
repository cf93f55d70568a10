"""KafkaServer: assembles one broker from its layers, runs its periodic tasks and shuts it down cleanly.

Start-up order: load and recover the logs, listen, then read the cluster metadata and lead every
registered partition (standalone), or join the ZooKeeper cluster (cluster mode, see ClusterMembership),
then serve the Prometheus metrics when metrics.port is set. Shutdown order: stop the metrics endpoint, stop
accepting, close connections, stop the scheduler (its periodic tasks and pending disk work), flush every
log, checkpoint recovery points and write the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from broker.admin_manager import AdminManager
from broker.authentication_metrics import AuthenticationMetrics
from broker.cluster.membership import ClusterMembership
from broker.config import KafkaConfig
from broker.coordinator.coordination import GroupCoordination, TransactionCoordination
from broker.kafka_apis import KafkaApis
from broker.kafka_scheduler import KafkaScheduler
from broker.log.cleaner_metrics import LogCleanerMetrics
from broker.log.cleaner import CleanerConfig
from broker.log.log_manager import LogManager
from broker.metadata import BrokerEndpoint, StandaloneMetadata
from broker.metrics import BrokerMetrics
from broker.replica_manager import ReplicaManager
from broker.security.acl_store import AclStore, FileAclStore
from broker.security.authorizer import AclAuthorizer
from broker.security.zk_acl_store import ZkAclStore
from broker.server.connection_quotas import parse_overrides as parse_connection_overrides
from broker.security.credential_store import CredentialStore, FileCredentialStore
from broker.server.sasl_authenticator import AuthenticationStats, SaslServerAuthenticator, SaslServerConfig
from broker.server.session import Session
from broker.security.listeners import uses_sasl, uses_ssl
from broker.security.ssl_factory import server_context
from broker.server.socket_server import CloseConnection, Handler, Listener, SocketServer
from broker.state_metrics import BrokerStateCollector
from pipeline.service.metrics_server import MetricsServer, serve_metrics
from pipeline.zk.client import BoundedZk

log = logging.getLogger(__name__)


class KafkaServer:
    """One broker process: storage, partitions, request handlers, network server and scheduler."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.log_manager: LogManager | None = None
        self.socket_server: SocketServer | None = None
        self.cluster: ClusterMembership | None = None
        self.scheduler: KafkaScheduler | None = None
        self.groups: GroupCoordination | None = None
        self.transactions: TransactionCoordination | None = None
        self.authorizer: AclAuthorizer | None = None
        self.apis: KafkaApis | None = None  # the request handlers, once the broker serves
        self.metrics = BrokerMetrics()
        # Authentications of every listener (SASL exchanges, TLS handshakes), exported as metrics.
        self.authentication_stats = AuthenticationStats()
        self.metrics.registry.register(AuthenticationMetrics(self.authentication_stats))
        self.sasl_configs: list[SaslServerConfig] = []
        self.metrics_port: int | None = None
        self._metrics_server: MetricsServer | None = None
        self._stopped = asyncio.Event()

    @property
    def port(self) -> int:
        """The inter-broker listener's bound port (the only one with host.name and port)."""
        return self.listener_port(self.config.inter_broker_listener_name)

    def listener_port(self, listener_name: str) -> int:
        """The bound port of a listener (``SSL``, or a name of listener.security.protocol.map)."""
        assert self.socket_server is not None
        return self.socket_server.bound_ports[listener_name.upper()]

    def _listeners(self) -> list[Listener]:
        """The socket server's listeners: TLS ones share one server context (ConfigError if the keystore or
        truststore cannot be loaded), SASL ones get an authenticator each with their own settings (in
        ``self.sasl_configs``: sasl.enabled.mechanisms and connections.max.reauth.ms may be set per listener) and the
        authentication counts in common."""
        config = self.config
        context = None
        if any(uses_ssl(endpoint.security_protocol) for endpoint in config.listeners):
            context = server_context(config.ssl_settings())
        read_timeout = config["socket.request.read.timeout.ms"]
        listeners = []
        for endpoint in config.listeners:
            authenticator = None
            if uses_sasl(endpoint.security_protocol):
                mechanisms = config.listener_setting(endpoint.listener_name, "sasl.enabled.mechanisms")
                sasl = SaslServerConfig(
                    tuple(m for m in mechanisms.split(",") if m), CredentialStore(),
                    reauth_ms=config.listener_setting(endpoint.listener_name, "connections.max.reauth.ms"),
                    timeout_s=read_timeout / 1000 if read_timeout > 0 else None,
                    max_receive_size=config["sasl.server.max.receive.size"],
                    failed_delay_s=config["connection.failed.authentication.delay.ms"] / 1000,
                    stats=self.authentication_stats)
                self.sasl_configs.append(sasl)
                authenticator = _authenticator_factory(sasl)
            listeners.append(Listener(endpoint, context if uses_ssl(endpoint.security_protocol) else None,
                                      authenticator))
        return listeners

    async def startup(self) -> None:
        config = self.config
        log_dirs = config.log_dirs
        for directory in log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        log_config = config.log_config()
        self.scheduler = KafkaScheduler(config["background.threads"])
        cleaner_config = CleanerConfig.from_properties(config)
        self.log_manager = LogManager(log_dirs, log_config, scheduler=self.scheduler,
                                      on_flush=self.metrics.observe_flush,
                                      cleaner_config=cleaner_config if cleaner_config.enable else None)
        if self.log_manager.cleaner is not None:
            self.metrics.registry.register(LogCleanerMetrics(self.log_manager.cleaner))
        self.log_manager.startup()
        log.info("loaded %d partition log(s) from %s in %.2fs", len(self.log_manager.all_logs()),
                 ",".join(map(str, log_dirs)), time.monotonic() - started)
        host, port = config.listen_address
        try:
            listeners = self._listeners()
        except BaseException:
            await self._stop_storage()
            raise
        # The socket server needs the handler and the handler the advertised port, known after bind.
        apis_holder: list[KafkaApis] = []

        def handle(frame: memoryview, session: Session) -> object:
            if not apis_holder:
                raise CloseConnection("the broker is still joining its cluster", "broker_not_ready")
            return apis_holder[0].handle(frame, session)
        self.socket_server = SocketServer(
            host, port, handle, config["socket.request.max.bytes"], listeners=listeners,
            use_sendfile=config["socket.sendfile.enable"],
            queued_max_request_bytes=config["queued.max.request.bytes"],
            connections_max_idle_ms=config["connections.max.idle.ms"],
            max_connections=config["max.connections"], max_connections_per_ip=config["max.connections.per.ip"],
            max_connections_per_ip_overrides=parse_connection_overrides(config["max.connections.per.ip.overrides"]),
            request_read_timeout_ms=config["socket.request.read.timeout.ms"])
        self.socket_server.authentication_stats = self.authentication_stats
        for sasl in self.sasl_configs:
            sasl.warnings = self.socket_server.warnings
        await self.socket_server.start()
        advertised = config.advertised_listeners(self.socket_server.bound_ports)
        if config["zookeeper.connect"]:
            try:
                self.cluster = ClusterMembership(config, self.log_manager, advertised, self.metrics)
                apis = await self.cluster.start()
                assert self.cluster.zk is not None
                await self._start_authorizer(apis, lambda: ZkAclStore(
                    BoundedZk(self.cluster.zk, config["zookeeper.session.timeout.ms"] / 1000)))
                apis_holder.append(apis)
            except BaseException:
                await self._abort_startup()
                raise
            mode, cluster_id = f"in cluster {config['zookeeper.connect']}", self.cluster.cluster_id
            credentials: CredentialStore = self.cluster.credentials
            self.groups = self.cluster.groups
            self.transactions = self.cluster.transactions
        else:
            inter_broker = next(e for e in advertised if e.listener_name == config.inter_broker_listener_name)
            endpoint = BrokerEndpoint(config.broker_id, inter_broker.host, inter_broker.port,
                                      tuple((e.listener_name, e.host, e.port) for e in advertised))
            metadata = StandaloneMetadata(log_dirs[0], endpoint)
            replica_manager = ReplicaManager(self.log_manager, metrics=self.metrics, broker_id=config.broker_id)
            admin = AdminManager(metadata, replica_manager, log_config, config["num.partitions"])
            admin.host_existing_topics()
            self.groups = GroupCoordination.standalone(config, endpoint, self.metrics.registry)
            self.transactions = TransactionCoordination.standalone(config, endpoint, metadata, metadata,
                                                                   self.metrics.registry)
            apis = KafkaApis(config.broker_id, replica_manager, admin, metadata, metadata,
                             config["auto.create.topics.enable"], config["fetch.max.wait.cap.ms"], self.groups.apis,
                             self.transactions.apis)
            try:
                await self._start_authorizer(apis, lambda: FileAclStore(log_dirs[0]))
            except BaseException:
                await self._abort_startup()
                raise
            apis_holder.append(apis)
            mode, cluster_id = "standalone", metadata.cluster_id
            credentials = FileCredentialStore(log_dirs[0])
        apis_holder[0].credentials = credentials
        for sasl in self.sasl_configs:
            sasl.store = credentials
        schedule = self.scheduler.schedule
        schedule("log-retention", self.log_manager.run_retention, config["log.retention.check.interval.ms"])
        schedule("log-flusher", self.log_manager.flush_dirty_logs, config["log.flush.scheduler.interval.ms"])
        schedule("recovery-point-checkpoint", self.log_manager.checkpoint_recovery_points,
                 config["log.flush.offset.checkpoint.interval.ms"])
        schedule("highwatermark-checkpoint", self.log_manager.checkpoint_high_watermarks,
                 config["replica.high.watermark.checkpoint.interval.ms"])
        assert self.groups is not None and self.transactions is not None
        self.groups.schedule(self.scheduler, asyncio.get_running_loop())
        self.apis = apis = apis_holder[0]
        self.transactions.start(getattr(apis, "write_txn_markers", None))
        self.transactions.schedule(self.scheduler, asyncio.get_running_loop())
        apis.client_warnings = apis.replica_manager.client_warnings = self.socket_server.warnings
        cluster = self.cluster
        self.metrics.registry.register(BrokerStateCollector(
            config.broker_id, self.log_manager, apis.replica_manager, apis.metadata, self.socket_server,
            (lambda: cluster.is_active_controller) if cluster is not None else (lambda: True),
            (lambda: cluster.fetchers.max_lag() if cluster.fetchers is not None else 0) if cluster is not None
            else (lambda: 0)))
        if config["metrics.port"] is not None:
            try:
                self._metrics_server = serve_metrics(self.metrics.registry, host, config["metrics.port"])
            except BaseException:
                await self._abort_startup()
                raise
            self.metrics_port = self._metrics_server.port
        log.info("broker %d started, listening on %s (cluster id %s, %s)", config.broker_id,
                 ", ".join(f"{e.listener_name}://{e.host}:{self.socket_server.bound_ports[e.listener_name]}"
                           for e in config.listeners), cluster_id, mode)

    async def _start_authorizer(self, apis: KafkaApis, store: Callable[[], AclStore]) -> None:
        """With authorizer.class.name set, load the ACLs and have ``apis`` check every request against them
        (before it serves any: the socket server refuses requests until then)."""
        config = self.config
        if not config.authorizer_enabled:
            return
        self.authorizer = AclAuthorizer(store(), config.super_users, config["allow.everyone.if.no.acl.found"])
        await self.authorizer.start()
        apis.authorizer = self.authorizer
        log.info("authorizer on: %d ACL(s), super users %s", len(self.authorizer.cache),
                 ",".join(sorted(config.super_users)) or "none")

    def _stop_metrics(self) -> None:
        server, self._metrics_server = self._metrics_server, None
        if server is not None:
            server.close()

    def _stop_authorizer(self) -> None:
        if self.authorizer is not None:
            self.authorizer.close()
            self.authorizer = None

    async def _abort_startup(self) -> None:
        self._stop_authorizer()
        if self.groups is not None:
            self.groups.close()
            self.groups = None
        if self.transactions is not None:
            await self.transactions.shutdown()
            self.transactions.close()
            self.transactions = None
        if self.cluster is not None:
            await self.cluster.close()
            self.cluster = None
        if self.socket_server is not None:
            await self.socket_server.stop_accepting()
            await self.socket_server.close_all()
        await self._stop_storage()

    async def _stop_storage(self) -> None:
        """Let the scheduler finish its disk work, then flush and close every log (off the loop)."""
        loop = asyncio.get_running_loop()
        if self.scheduler is not None:
            await loop.run_in_executor(None, self.scheduler.shutdown)
            self.scheduler = None
        if self.log_manager is not None:
            await loop.run_in_executor(None, self.log_manager.shutdown)
            self.log_manager = None

    async def shutdown(self) -> None:
        log.info("shutting down")
        if self.cluster is not None:
            # Still serving: the new leaders' followers (this broker among them) fetch what they lack.
            await self.cluster.controlled_shutdown()
        await asyncio.get_running_loop().run_in_executor(None, self._stop_metrics)
        if self.groups is not None:
            self.groups.shutdown()
        if self.transactions is not None:
            await self.transactions.shutdown()
        if self.socket_server is not None:
            await self.socket_server.stop_accepting()
            await self.socket_server.close_all()
        if self.cluster is not None:
            self.cluster.quiesce()
        self._stop_authorizer()
        await self._stop_storage()
        if self.groups is not None:
            self.groups.close()
        if self.transactions is not None:
            self.transactions.close()
        # Deregister only after flushing: once /brokers/ids/<id> vanishes, the partitions go offline.
        if self.cluster is not None:
            await self.cluster.close()
            self.cluster = None
        log.info("shut down cleanly")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def _authenticator_factory(config: SaslServerConfig) -> Callable[[Session, Handler], SaslServerAuthenticator]:
    """What makes each connection's SASL authenticator on a listener with ``config``."""
    def make(session: Session, handler: Handler) -> SaslServerAuthenticator:
        return SaslServerAuthenticator(session, config, handler)
    return make

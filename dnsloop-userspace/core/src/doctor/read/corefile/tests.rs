use super::*;

fn parse(text: &str) -> Corefile {
    Corefile::parse("Corefile".into(), text, 1)
}

/// kubespray's rendered node-local-dns Corefile (field report 004), trimmed to two blocks.
const NODELOCALDNS: &str = "\
cluster.local:53 {
    errors
    cache {
        success 9984 30
        denial 9984 5
    }
    reload
    loop
    bind 169.254.25.10
    forward . 10.233.0.3 {
        force_tcp
    }
    prometheus :9253
    health 169.254.25.10:9254
}
.:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.25.10
    forward . /etc/resolv.conf
    prometheus :9253
}
";

#[test]
fn server_blocks_keys_binds_and_forwards() {
    let corefile = parse(NODELOCALDNS);
    let servers = corefile.server_blocks();
    assert_eq!(servers.len(), 2);
    assert_eq!(servers[0].label(), "cluster.local:53");
    assert_eq!(servers[0].keys[0].zone, "cluster.local");
    assert_eq!(servers[0].port(), Some(53));
    assert_eq!(servers[1].line, 16);
    let binds = servers[0].binds();
    assert_eq!(binds[0].address, Some("169.254.25.10".parse().unwrap()));
    assert_eq!(binds[0].line, 9);
    let forward = &servers[0].forwards()[0];
    assert_eq!(forward.line, 10);
    assert_eq!(forward.describe(), "forward . 10.233.0.3");
    assert_eq!(
        forward.targets,
        [Target::Address {
            text: "10.233.0.3".into(),
            address: "10.233.0.3:53".parse().unwrap()
        }]
    );
    assert_eq!(
        servers[1].forwards()[0].targets,
        [Target::File("/etc/resolv.conf".into())]
    );
    assert!(servers[1].has_plugin("loop"));
    // The nested block's directives belong to the forward, not to the server block.
    assert!(!servers[0].has_plugin("force_tcp"));
    assert!(corefile.is_node_local_dns());
}

#[test]
fn forward_targets_in_every_spelling() {
    let corefile = parse(
        ". {\n forward . dns://10.0.0.2:5353 tls://9.9.9.9 [::1]:53 fd00::53 127.0.0.1:53 fe80::1%eth0 {$UPSTREAM} __PILLAR__UPSTREAM__SERVERS__ upstream.conf ./resolv.conf\n}\n",
    );
    let forward = &corefile.server_blocks()[0].forwards()[0];
    let addresses: Vec<String> = forward
        .targets
        .iter()
        .filter_map(|target| match target {
            Target::Address { address, .. } => Some(address.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        addresses,
        [
            "10.0.0.2:5353",
            "9.9.9.9:853",
            "[::1]:53",
            "[fd00::53]:53",
            "127.0.0.1:53",
            "[fe80::1]:53"
        ]
    );
    assert_eq!(
        forward.targets[6..],
        [
            Target::Other("{$UPSTREAM}".into()),
            Target::Other("__PILLAR__UPSTREAM__SERVERS__".into()),
            Target::Other("upstream.conf".into()),
            Target::File("./resolv.conf".into()),
        ]
    );
}

#[test]
fn keys_with_schemes_ports_and_several_zones() {
    let corefile = parse("tls://.:853 {\n}\ncluster.local:53 in-addr.arpa:53,\n  ip6.arpa:53 {\n}\nexample.org {\n}\n.:{$PORT} {\n}\n");
    let servers = corefile.server_blocks();
    assert_eq!(servers[0].port(), Some(853));
    assert_eq!(servers[0].keys[0].zone, ".");
    assert_eq!(
        servers[1]
            .keys
            .iter()
            .map(|key| key.zone.as_str())
            .collect::<Vec<_>>(),
        ["cluster.local", "in-addr.arpa", "ip6.arpa"]
    );
    assert_eq!(servers[2].port(), Some(53));
    assert_eq!(servers[3].port(), None);
}

#[test]
fn snippets_are_imported_and_file_imports_are_skipped() {
    let corefile = parse(
        "(upstream) {\n    forward . 10.0.0.2\n    loop\n}\n.:53 {\n    import upstream\n    import /etc/coredns/custom/*.override\n}\nimport /etc/coredns/custom/*.server\n",
    );
    let servers = corefile.server_blocks();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].forwards()[0].line, 2);
    assert!(servers[0].has_plugin("loop"));
    assert!(servers[0].has_plugin("import"));
}

#[test]
fn a_snippet_importing_itself_ends() {
    let corefile = parse("(a) {\n import a\n}\n. {\n import a\n}\n");
    assert_eq!(corefile.server_blocks().len(), 1);
}

#[test]
fn a_single_block_may_leave_out_its_braces() {
    let corefile = parse(".:53\nforward . 10.0.0.2\nloop\n");
    assert_eq!(corefile.server_blocks()[0].forwards()[0].line, 2);
}

#[test]
fn braces_on_one_line_and_on_the_next() {
    let corefile = parse(".:53\n{\n  forward . 10.0.0.2 { force_tcp }\n  loop\n}\n");
    let server = &corefile.server_blocks()[0];
    assert!(server.has_plugin("loop"));
    assert_eq!(server.forwards()[0].targets.len(), 1);
}

#[test]
fn unbalanced_braces_are_syntax_errors_with_a_line() {
    let unclosed = parse(".:53 {\n  forward . 10.0.0.2 {\n    force_tcp\n}\n");
    assert_eq!(unclosed.servers.unwrap_err().line, 1);
    let stray = parse(".:53 {\n}\n}\n");
    assert_eq!(stray.servers.unwrap_err().line, 3);
    let no_brace = parse("a.example {\n}\nb.example\nforward . 1.1.1.1\n");
    assert!(no_brace.servers.is_err());
    let lone = parse("{\n}\n");
    assert!(lone.servers.is_err());
}

#[test]
fn placeholders_are_found_once_with_their_first_line() {
    let corefile = parse(
        "__PILLAR__DNS__DOMAIN__:53 {\n    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__\n    forward . __PILLAR__CLUSTER__DNS__\n    health __PILLAR__LOCAL__DNS__:8080\n}\n",
    );
    assert_eq!(
        corefile.placeholders,
        [
            ("__PILLAR__DNS__DOMAIN__".to_string(), 1),
            ("__PILLAR__LOCAL__DNS__".to_string(), 2),
            ("__PILLAR__DNS__SERVER__".to_string(), 2),
            ("__PILLAR__CLUSTER__DNS__".to_string(), 3),
        ]
    );
    assert!(corefile.is_node_local_dns());
}

#[test]
fn odd_input_never_panics() {
    let junk =
        String::from_utf8_lossy(&[0, 0xff, b'{', b'\n', 0x80, b'}', b'}', b'"']).into_owned();
    for text in [
        "",
        "\n\n",
        "}",
        "{",
        "forward",
        ".:53 {\r\n\tforward\t.\t10.0.0.2\r\n}",
        ".:53 { forward . 10.0.0.2 }",
        "# only a comment",
        junk.as_str(),
        "a {\n b {\n c {\n d {\n }\n }\n }\n}\n",
    ] {
        let _ = parse(text);
    }
    let huge = format!(".:53 {{\n forward . {}\n}}\n", "10.0.0.2 ".repeat(100_000));
    assert_eq!(
        parse(&huge).server_blocks()[0].forwards()[0].targets.len(),
        100_000
    );
    let deep = format!("{}{}", ". {\n a {\n".repeat(10_000), "}\n".repeat(20_000));
    let refused = parse(&deep).servers.unwrap_err();
    assert!(refused.message.contains("nested"), "{refused}");
}

#[test]
fn crlf_and_missing_final_newline_keep_lines() {
    let corefile = parse(".:53 {\r\n    loop\r\n    forward . 10.0.0.2\r\n}");
    assert_eq!(corefile.server_blocks()[0].forwards()[0].line, 3);
}

package inspecttest

// Lock-file excerpts: the shapes of go.sum, package-lock.json, Cargo.lock
// and poetry.lock (hashes, integrity strings, checksums).
const goSum = `
dario.cat/mergo v1.0.1 h1:Ra4+bf83h2ztPIQYNP99R6m+Y7KfnARDfID+a+vLl4s=
dario.cat/mergo v1.0.1/go.mod h1:uNxQE+84aUszobStD9th8a29P2fMDhsBdgRYvZOxGmk=
github.com/AdaLogics/go-fuzz-headers v0.0.0-20230811130428-ced1acdcaa24 h1:bvDV9vkmnHYOMsOr4WLk+Vo07yKIzd94sVoIqshQ4bU=
github.com/AdaLogics/go-fuzz-headers v0.0.0-20230811130428-ced1acdcaa24/go.mod h1:8o94RPi1/7XTJvwPpRSzSUedZrtlirdB3r9Z20bi2f8=
github.com/BurntSushi/toml v1.6.0 h1:dRaEfpa2VI55EwlIW72hMRHdWouJeRF7TPYhI+AUQjk=
github.com/BurntSushi/toml v1.6.0/go.mod h1:ukJfTF/6rtPPRCnwkur4qwRxa8vTRFBF0uk2lLoLwho=
github.com/Masterminds/goutils v1.1.1 h1:5nUrii3FMTL5diU80unEVvNevw1nH4+ZV4DSLVJLSYI=
github.com/Masterminds/goutils v1.1.1/go.mod h1:8cTjp+g8YejhMuvIA5y2vz3BpJxksy863GQaJW2MFNU=
github.com/Masterminds/semver/v3 v3.5.0 h1:kQceYJfbupGfZOKZQg0kou0DgAKhzDg2NZPAwZ/2OOE=
github.com/Masterminds/semver/v3 v3.5.0/go.mod h1:4V+yj/TJE1HU9XfppCwVMZq3I84lprf4nC11bSS5beM=
github.com/Masterminds/sprig/v3 v3.3.0 h1:mQh0Yrg1XPo6vjYXgtf5OtijNAKJRNcTdOOGZe3tPhs=
github.com/Masterminds/sprig/v3 v3.3.0/go.mod h1:Zy1iXRYNqNLUolqCpL4uhk6SHUMAOSCzdgBfDb35Lz0=
github.com/agnivade/levenshtein v1.2.1 h1:EHBY3UOn1gwdy/VbFwgo4cxecRznFk7fKWN1KOX7eoM=
github.com/agnivade/levenshtein v1.2.1/go.mod h1:QVVI16kDrtSuwcpd0p1+xMC6Z/VfhtCyDIjcwga4/DU=
github.com/arbovm/levenshtein v0.0.0-20160628152529-48b4e1c0c4d0 h1:jfIu9sQUG6Ig+0+Ap1h4unLjW6YQJpKZVmUzxsD4E/Q=
github.com/arbovm/levenshtein v0.0.0-20160628152529-48b4e1c0c4d0/go.mod h1:t2tdKJDJF9BV14lnkjHmOQgcvEKgtqs5a1N3LNdJhGE=
github.com/beorn7/perks v1.0.1 h1:VlbKKnNfV8bJzeqoa4cOKqO6bYr3WgKZxO8Z16+hsOM=
github.com/beorn7/perks v1.0.1/go.mod h1:G2ZrVWU2WbWT9wwq4/hrbKbnv/1ERSJQ0ibhJ6rlkpw=
github.com/blang/semver/v4 v4.0.0 h1:1PFHFE6yCCTv8C1TeyNNarDzntLi7wMI5i/pzqYIsAM=
github.com/blang/semver/v4 v4.0.0/go.mod h1:IbckMUScFkM3pff0VJDNKRiT6TG/YpiHIM2yvyW5YoQ=
github.com/cenkalti/backoff/v5 v5.0.3 h1:ZN+IMa753KfX5hd8vVaMixjnqRZ3y8CuJKRKj1xcsSM=
github.com/cenkalti/backoff/v5 v5.0.3/go.mod h1:rkhZdG3JZukswDf7f0cwqPNk4K0sa+F97BxZthm/crw=
github.com/cespare/xxhash/v2 v2.3.0 h1:UL815xU9SqsFlibzuggzjXhog7bL6oX9BbNZnL2UFvs=
github.com/cespare/xxhash/v2 v2.3.0/go.mod h1:VGX0DQ3Q6kWi7AoAeZDth3/j3BFtOZR5XLFGgcrjCOs=
github.com/chromedp/cdproto v0.159.0 h1:wepTaKq5AGTwIxXh6h5bESQcvcfnSb2ItnFChA62/b8=
github.com/chromedp/cdproto v0.159.0/go.mod h1:h68JaIuFr9o3yiayxEYhBdvaxgYO3shDrPSYhNlyfu0=
github.com/chromedp/chromedp v0.23.0 h1:iNGzFz+exVgG4OynS2CnYzlAjHiOFW++fUPbbmSwy0w=
github.com/chromedp/chromedp v0.23.0/go.mod h1:hJcPsoPrgxu4ulIXhO1WmtKjosCD8jbZh0+TeVFsod8=
github.com/coder/websocket v1.8.14 h1:9L0p0iKiNOibykf283eHkKUHHrpG7f65OE3BhhO7v9g=
github.com/coder/websocket v1.8.14/go.mod h1:NX3SzP+inril6yawo5CQXx8+fk145lPDC6pumgx0mVg=
github.com/containernetworking/cni v1.3.1 h1:gnHlU/YC1bJcS+CSh+pYQKeuu4O4gsMGW1NMaLhkzW4=
github.com/containernetworking/cni v1.3.1/go.mod h1:OtVXL0yXMfQb+p93OC/vRuhjpxsO1gAV0smjt28UQUQ=
github.com/coreos/go-iptables v0.8.0 h1:MPc2P89IhuVpLI7ETL/2tx3XZ61VeICZjYqDEgNsPRc=
github.com/coreos/go-iptables v0.8.0/go.mod h1:Qe8Bv2Xik5FyTXwgIbLAnv2sWSBmvWdFETJConOQ//Q=
github.com/cpuguy83/go-md2man/v2 v2.0.6/go.mod h1:oOW0eioCTA6cOiMLiUPZOpcVxMig6NIQQ7OS05n1F4g=
github.com/cyphar/filepath-securejoin v0.7.0 h1:s0Y3ITPy6sQn5xt54DuYvTF8hu134ooYLUb58DX/HjE=
github.com/cyphar/filepath-securejoin v0.7.0/go.mod h1:ymLGms/u3BYaviIiuKFnUx8EkQEZeK6cInNoAPJA3o4=
github.com/davecgh/go-spew v1.1.0/go.mod h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=
github.com/davecgh/go-spew v1.1.1/go.mod h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=
github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc h1:U9qPSI2PIWSS1VwoXQT9A3Wy9MM3WgvqSxFWenqJduM=
`

const packageLock = `{
  "name": "app",
  "version": "1.0.0",
  "lockfileVersion": 3,
  "requires": true,
  "packages": {
    "": {
      "name": "app",
      "version": "1.0.0",
      "dependencies": {
        "lodash": "^4.17.21"
      }
    },
    "node_modules/lodash": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/lodash/-/lodash-1.0.0.tgz",
      "integrity": "sha512-WWBGtyfDRrPIzxFy0HaPccRrj678i95zax2MixXJQT5RTkjHJJWsd/YhWwqy4EaG9POVDAK/RjxiWi0jaoAHnA==",
      "license": "MIT"
    },
    "node_modules/express": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/express/-/express-1.0.0.tgz",
      "integrity": "sha512-6xtPQCUSpt8+nbktNn34Ey7lOwCEK+Q1S53JHtAG9g3kpuO8jXYUWIKQ/zqxGFK7UF/qL+1Lx5kPZRuA+SGJkw==",
      "license": "MIT"
    },
    "node_modules/chalk": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/chalk/-/chalk-1.0.0.tgz",
      "integrity": "sha512-6atgQZeTU4J1ehqD9au8Egn5mJ26o6RQ9FDBBsDhA/+H88Sh8ELEzZ3jbrJklV9nDJmSGKvnX2PadiVTd1UozA==",
      "license": "MIT"
    },
    "node_modules/left-pad": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.0.0.tgz",
      "integrity": "sha512-XRcglhh3p2lHAu4gFg75i5owZ3/uttIZh11iKj+W2fqc4Iu8OvwIHkDSftaw4gURo0WA2fT2oguwTa4HChLwJw==",
      "license": "MIT"
    },
    "node_modules/debug": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/debug/-/debug-1.0.0.tgz",
      "integrity": "sha512-Il0FuRhRlFio/MHmSTpOhUwATadvYlC49SGX9HCU9x7phHJcMURqGWfw1V9Nx0eT3UTZMvK99Q131CiNZjvxqw==",
      "license": "MIT"
    },
    "node_modules/ms": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/ms/-/ms-1.0.0.tgz",
      "integrity": "sha512-SyNc08X8gFJpY3/JQpM1+08hAGmUO+vpGmyI0DMbZhBljt2J2iDTM9NsdIThPRaOtEYH7QElOMh6+WGtg2FtvQ==",
      "license": "MIT"
    },
    "node_modules/accepts": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/accepts/-/accepts-1.0.0.tgz",
      "integrity": "sha512-O54Py2vlI9rI5/F0NuzgA5D1bYKnXHP+M7x88qtmV2VljFNZ9t+OMSO6KH8Nrvu3wIRM1zt4JshkN+NC2ns8mA==",
      "license": "MIT"
    },
    "node_modules/mime-types": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/mime-types/-/mime-types-1.0.0.tgz",
      "integrity": "sha512-h6r0Mv74KWXlrVPUj1y90ZLN+Xcr8YRihdkwkA15BUapUF9LOvABxudyHMAb8kFUvNTUZlRkYhOgSSSn/KZsmg==",
      "license": "MIT"
    },
    "node_modules/negotiator": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/negotiator/-/negotiator-1.0.0.tgz",
      "integrity": "sha512-p0ldJy7pLeSSM5wntPGaFfdY/Lcoh906hPg1/cl8YkZ1Px2CGRgoDDd0GqkJda/iQCH6cGrU3hMxAtR+ARXXRA==",
      "license": "MIT"
    },
    "node_modules/body-parser": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/body-parser/-/body-parser-1.0.0.tgz",
      "integrity": "sha512-pRnmfIvzAId3zUrbWiUwVBqWtJA9N49jiop6LUogEGOVkUHX78nuZ8Gd9A886FbdIyLMSgnC1L5iLpiF3Knftg==",
      "license": "MIT"
    }
  }
}`

const cargoLock = `version = 3

[[package]]
name = "serde"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "8b917c4b6163bc82ef4aff025c6f5f4d54205232c4595f39b7b43008256a6cb7"

[[package]]
name = "serde_json"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "54445c661ba1c59f5d55f7204d0b0d065b90d7fb225643caadb2b9112da48f63"

[[package]]
name = "tokio"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "434de5e6a47f94752708362f575012e50855c5de6eb557564c9d7ae267b35e4c"

[[package]]
name = "regex"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "42d58222b328681b9923634991312932089876a0242f78cf488157aa24969c1a"

[[package]]
name = "aho-corasick"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "4dd1132badba391768860ad21b7e03d97a3bfe7ac79c92117cdb6bbcff138a8e"

[[package]]
name = "memchr"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "5c8ebac0ac2c7fcfc4eefe5df94d2dbc1b4ac73bc50d1119ffb0172badf18936"

[[package]]
name = "libc"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "16c8c6eb85e05438f5d6c60ff9869072a3a3b1618aa1481ac7a0cb049f06f51d"

[[package]]
name = "rand"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "1c1c65e8f2de96f1f1dd8a3b574871477a13cc8fbd46b591e988206170735238"

`

const poetryLock = `[[package]]
name = "requests"
version = "2.0.0"
description = "requests for Python"
optional = false
python-versions = ">=3.8"
files = [
    {file = "requests-2.0.0-py3-none-any.whl", hash = "sha256:2fe7df23ec24c06687e9ef2c3d159dbc428ed150688dfd1a27ca50acf1570046"},
    {file = "requests-2.0.0.tar.gz", hash = "sha256:66db902bfbf3299261f7fd6fd93fab2a6e576f2c8477b73502f0dd595c1ab0e0"},
]

[[package]]
name = "urllib3"
version = "2.0.0"
description = "urllib3 for Python"
optional = false
python-versions = ">=3.8"
files = [
    {file = "urllib3-2.0.0-py3-none-any.whl", hash = "sha256:ababc86b8673bec05dedb721d6f94235258788f91f84f8d4e40e7b2742a5e3c7"},
    {file = "urllib3-2.0.0.tar.gz", hash = "sha256:bd5fb2813537c69ddd89269d286b362af3085841bd1e30074be6fa179c1fd8ab"},
]

[[package]]
name = "idna"
version = "2.0.0"
description = "idna for Python"
optional = false
python-versions = ">=3.8"
files = [
    {file = "idna-2.0.0-py3-none-any.whl", hash = "sha256:3c4046d307045f8fb1608d5110ea281ef7e27e5886da1ea66b8787992f00df42"},
    {file = "idna-2.0.0.tar.gz", hash = "sha256:008c0365d294ee0777c322420edb5364b595a82393eaf8beda9c79a858155c12"},
]

[[package]]
name = "certifi"
version = "2.0.0"
description = "certifi for Python"
optional = false
python-versions = ">=3.8"
files = [
    {file = "certifi-2.0.0-py3-none-any.whl", hash = "sha256:f975795612d235076361d42ddd4ac2d6e2021a746108b6eb790ab471ea41915c"},
    {file = "certifi-2.0.0.tar.gz", hash = "sha256:f170ececf16df546ce4a16e7c74345d115b26d05761884a17a13fdb1d33ea41d"},
]

[[package]]
name = "charset-normalizer"
version = "2.0.0"
description = "charset-normalizer for Python"
optional = false
python-versions = ">=3.8"
files = [
    {file = "charset-normalizer-2.0.0-py3-none-any.whl", hash = "sha256:9a2e2400568c4973ff82d33fb7e535c462e9244d8667cf3539b1343403c67276"},
    {file = "charset-normalizer-2.0.0.tar.gz", hash = "sha256:2bd2e98c473a129dcb871e97d10ad9f7d2297a2757d25292b24828915df2227f"},
]

`
